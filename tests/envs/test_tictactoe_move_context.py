"""The one-move task asked inside a full game's conversation (env.context) and on boards with
fewer marks (env.min_marks): the prompts a policy also meets when it plays whole games."""

import pytest

from arl.config import ConfigError, load_config
from arl.tools import format_tool_call, parse_tool_call
from arl.types import Message, ToolCall
from envs import tictactoe_rules as rules
from envs.registry import env_config, make_env
from envs.tictactoe_move import TicTacToeMoveEnv, opening_moves, replay


class _Scripted:
    def __init__(self, squares):
        self._squares = iter(squares)

    def choose(self, board, mark, rng):
        return next(self._squares)


def _full_game_prompt(moves, seat):
    """The conversation of arl's full game (envs.tictactoe) in which `moves` were played,
    driven move by move through the game env itself."""
    from envs.config import TicTacToeConfig
    from envs.tictactoe import make_tictactoe

    mine, theirs = moves[seat == "O"::2], moves[seat == "X"::2]
    game = make_tictactoe(TicTacToeConfig(name="tictactoe", seat=seat), _Scripted(theirs))
    reset = game.reset(123)
    messages = list(reset.messages)
    for square in mine:
        text = format_tool_call(ToolCall("choose_square", {"square": square}))
        messages += [Message("assistant", text),
                     *game.step(parse_tool_call(text, reset.tools)).messages]
    return messages, game.board


@pytest.mark.parametrize("seed", range(12))
def test_game_context_is_the_full_games_own_conversation(seed):
    env = make_env(env_config("tictactoe_move", context="game", min_marks=0))
    reset = env.reset(seed)
    moves = opening_moves(seed, 0)
    messages, board = _full_game_prompt(moves, env.agent)
    assert list(reset.messages) == messages
    assert env.board == board == replay(moves) and env.agent == rules.to_move(board)
    assert [t.name for t in reset.tools] == ["choose_square"]
    assert reset.messages[-1].content.endswith("Your move.")


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
    kinds = {seed: len(env.reset(seed).messages) > 2 or "against" in
             env.reset(seed).messages[0].content for seed in range(20)}
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


def test_min_marks_above_seven_fails_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match="env.min_marks"):
        load_config([], ["env.name=tictactoe_move", "env.min_marks=8"], check_paths=False)
