"""Full games asked one board at a time (env.context: board): every turn is the one-move
task's prompt for the current board, in a conversation of its own, and a training row of its
own; the one-move task is evaluated in such games; env.max_marks reaches the last move."""

import numpy as np
import pytest

from arl.config import ConfigError, load_config
from arl.envs import tictactoe_rules as rules
from arl.envs.registry import TICTACTOE_MOVE, env_config, make_env
from arl.envs.tictactoe_move import PositionEnv, opening_moves, replay
from arl.episode import ChatRenderer, run_episodes
from arl.learner.collate import collate
from arl.types import SamplingParams, ToolCall
from tests.builders import ScriptedEngine


def _call(square: int) -> ToolCall:
    return ToolCall("choose_square", {"square": square})


def _one_move_prompt(board, agent):
    return PositionEnv(env_config("tictactoe_move"), board, agent).reset(0)


@pytest.mark.parametrize("seed", range(6))
def test_each_turn_is_the_one_move_tasks_prompt_for_the_board(seed):
    env = make_env(env_config("tictactoe", opponent="random", context="board"))
    reset = env.reset(seed)
    assert reset == _one_move_prompt(env.board, env.agent)  # O's: the opening move is on it
    while True:
        step = env.step(_call(rules.legal_moves(env.board)[0]))
        if step.terminated:
            assert step.restart is None and step.outcome is not None
            break
        assert step.restart == _one_move_prompt(env.board, env.agent)
        assert "Opponent played" in step.messages[0].content  # the transcript keeps the reply


def test_game_context_extends_one_conversation():
    env = make_env(env_config("tictactoe", opponent="random"))
    env.reset(0)
    step = env.step(_call(rules.legal_moves(env.board)[0]))
    assert not step.terminated and step.restart is None


def test_the_move_task_is_evaluated_in_games_asked_as_it_was_trained():
    for context, game in (("board", "board"), ("game", "game"), ("mixed", "game")):
        name, cfg = TICTACTOE_MOVE.eval_game(env_config("tictactoe_move", context=context),
                                             "random", "O")
        assert (name, cfg.context, cfg.seat, cfg.opponent) == ("tictactoe", game, "O", "random")


class _Recording(ScriptedEngine):
    """A scripted policy (the lowest legal square) that keeps every prompt it was asked."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer, lambda board, agent: board.index(".") + 1)
        self.prompts: list[list[int]] = []

    def generate(self, prompts, params):
        self.prompts += [list(p) for p in prompts]
        return super().generate(prompts, params)


def test_every_turn_is_a_row_that_opens_with_its_own_prompt(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    engine = _Recording(tok)
    renderer = ChatRenderer(tok, stop_token=tok.eos_token)
    cfg = env_config("tictactoe", opponent="random", context="board")
    trajs = run_episodes(engine, renderer, [(make_env(cfg), s, s) for s in range(6)],
                         SamplingParams(0.0, 1.0, 48, 0), max_turns=9)
    assert len(engine.prompts) == sum(t.num_turns for t in trajs)
    asked = iter(engine.prompts)
    for turn in range(9):  # turn k asks every game that is still on, in order
        for t in (t for t in trajs if t.num_turns > turn):
            row = t.rows[turn]
            prompt = next(asked)
            # the engine is asked the row's own prompt, never the rows before it
            assert t.token_ids[row][: len(prompt)].tolist() == prompt
            assert t.loss_mask[row][: len(prompt)].sum() == 0 and t.loss_mask[row][-1] == 1
            assert tok.decode(prompt).count("<|im_start|>user") == 1
    assert all(len(t.rows) == t.num_turns for t in trajs)
    assert any(t.num_turns >= 3 for t in trajs)
    assert {t.outcome.kind for t in trajs} <= {"win", "draw", "loss"}  # never illegal
    # the learner trains each turn as a sequence of its own; an episode weighs 1 in all
    batch = collate(trajs, np.ones(len(trajs), dtype=np.float32), tok.pad_token_id)
    assert batch.input_ids.shape[0] == sum(t.num_turns for t in trajs)
    assert batch.weights.sum().item() == pytest.approx(len(trajs))


def test_perfect_play_in_board_context_draws_minimax(tiny_model_dir):
    from transformers import AutoTokenizer

    from arl.rollout.evaluation import play_games

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    best = ScriptedEngine(tok, lambda board, agent: rules.best_moves(board, agent)[0])
    for seat in ("X", "O"):
        cfg = env_config("tictactoe", opponent="minimax", context="board", seat=seat)
        rates = play_games(best, cfg, 4, 1, SamplingParams(0.0, 1.0, 48, 0))
        assert rates["draw"].count == 4


def test_max_marks_reaches_the_last_move_and_the_default_keeps_seven():
    wide = {len(rules.occupied_squares(replay(opening_moves(s, 2, 8)))) for s in range(600)}
    default = {len(rules.occupied_squares(replay(opening_moves(s)))) for s in range(600)}
    assert 8 in wide and max(default) == 7


@pytest.mark.parametrize("overrides, key", [(["env.max_marks=9"], "env.max_marks"),
                                            (["env.min_marks=5", "env.max_marks=4"],
                                             "env.min_marks")])
def test_mark_bounds_outside_the_game_fail_naming_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key):
        load_config([], ["env.name=tictactoe_move", *overrides], check_paths=False)


def _final_board(cfg, variant: int, seed: int = 3):
    """The board a game ends on when the agent always plays its lowest free square."""
    env = make_env(cfg, variant=variant)
    env.reset(seed)
    while not env.step(_call(rules.legal_moves(env.board)[0])).terminated:
        pass
    return env.agent, env.board


def test_a_groups_games_share_the_opponents_stream_unless_each_has_its_own():
    shared = env_config("tictactoe", opponent="random")
    own = env_config("tictactoe", opponent="random", opponent_stream="episode")
    assert len({_final_board(shared, v) for v in range(8)}) == 1
    games = {_final_board(own, v) for v in range(8)}
    assert len(games) > 1 and len({agent for agent, _ in games}) == 1  # one seat a group
    assert _final_board(own, 5) == _final_board(own, 5)  # reproducible
