"""The one-move task asked inside a full game's conversation (env.context) and on boards with
fewer marks (env.min_marks): the prompts a policy also meets when it plays whole games."""

import pytest

from arl.config import ConfigError, load_config
from arl.envs import tictactoe_rules as rules
from arl.envs.registry import env_config, make_env
from arl.envs.tictactoe_move import TicTacToeMoveEnv, opening_moves, replay
from arl.tools import parse_tool_call
from arl.types import ToolCall


def test_game_context_reads_as_the_full_game_at_that_turn():
    env = make_env(env_config("tictactoe_move", context="game", min_marks=0))
    reset = env.reset(5)  # the moves 6 (X), 1 (O), 9 (X), 5 (O): X to move
    assert opening_moves(5, 0) == (6, 1, 9, 5)
    call = '<tool_call>{{"name": "choose_square", "arguments": {{"square": {}}}}}</tool_call>'
    assert [(m.role, m.content) for m in reset.messages] == [
        ("system", "You play tic-tac-toe as X against an opponent. "
                   "Reply with one choose_square tool call per turn."),
        ("user", "X: -\nO: -\nfree: 1 2 3 4 5 6 7 8 9\nYou are X. Your move."),
        ("assistant", call.format(6)),
        ("tool", "You played square 6. Opponent played square 1.\n"
                 "X: 6\nO: 1\nfree: 2 3 4 5 7 8 9\nYour move."),
        ("assistant", call.format(9)),
        ("tool", "You played square 9. Opponent played square 5.\n"
                 "X: 6 9\nO: 1 5\nfree: 2 3 4 7 8\nYour move."),
    ]
    assert [t.name for t in reset.tools] == ["choose_square"]


@pytest.mark.parametrize("seed", range(12))
def test_game_context_replays_the_moves_with_the_agent_to_move(seed):
    env = make_env(env_config("tictactoe_move", context="game", min_marks=0))
    reset = env.reset(seed)
    moves = opening_moves(seed, 0)
    assert env.board == replay(moves) and env.agent == rules.to_move(env.board)
    calls = [parse_tool_call(m.content, reset.tools) for m in reset.messages
             if m.role == "assistant"]
    assert [c.arguments["square"] for c in calls] == list(moves[env.agent == "O"::2])
    roles = [m.role for m in reset.messages]
    assert roles == ["system", "user"] + ["assistant", "tool"] * len(calls)
    assert reset.messages[-1].content.endswith(
        f"{rules.render(env.board, 'lists')}\nYou are {env.agent}. Your move."
        if not calls else f"{rules.render(env.board, 'lists')}\nYour move.")


def test_the_move_is_scored_as_on_the_board_alone():
    board_env = make_env(env_config("tictactoe_move"))
    game_env = make_env(env_config("tictactoe_move", context="game"))
    for seed in range(30):
        board_env.reset(seed)
        game_env.reset(seed)
        assert game_env.board == board_env.board
        square = rules.legal_moves(board_env.board)[0]
        call = ToolCall("choose_square", {"square": square})
        assert game_env.step(call).reward == board_env.step(call).reward


def test_mixed_asks_every_other_start_state_in_a_game():
    env = make_env(env_config("tictactoe_move", context="mixed"))
    kinds = {seed: "against" in env.reset(seed).messages[0].content for seed in range(20)}
    assert kinds == {seed: seed % 2 == 1 for seed in range(20)}


def test_min_marks_reaches_the_first_moves_and_the_default_keeps_two():
    low = {len(rules.occupied_squares(replay(opening_moves(s, 0)))) for s in range(400)}
    default = {len(rules.occupied_squares(replay(opening_moves(s)))) for s in range(400)}
    assert {0, 1} <= low and min(default) == 2


def test_symmetric_images_of_a_game_replay_the_image_of_each_move():
    cfg = env_config("tictactoe_move", context="game", group_symmetries=True)
    plain = TicTacToeMoveEnv(env_config("tictactoe_move", context="game"))
    plain.reset(7)
    for variant in range(8):
        env = TicTacToeMoveEnv(cfg, variant)
        env.reset(7)
        perm = rules.SYMMETRIES[variant]
        assert env.board == tuple(plain.board[i] for i in perm)
        assert not rules.is_terminal(env.board)


def test_min_marks_above_seven_fails_naming_the_key():
    with pytest.raises(ConfigError, match="env.min_marks"):
        load_config([], ["env.name=tictactoe_move", "env.min_marks=8"], check_paths=False)
