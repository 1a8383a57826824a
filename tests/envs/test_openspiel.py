"""The OpenSpiel adapter: conformance on two games, its bots, and 3 GSPO steps on Ray."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("pyspiel", reason="the openspiel extra: pip install -e '.[openspiel]'")

from arl.config import ConfigError, load_config  # noqa: E402
from arl.env_spec import resolve_env  # noqa: E402
from arl.envs.check import check_spec  # noqa: E402
from arl.types import ToolCall, ToolCallError, ToolCallErrorKind  # noqa: E402
from tests.builders import CI, ci_config, metrics_rows  # noqa: E402


def _env_cfg(*overrides: str):
    return load_config([CI], ["env.name=openspiel", *overrides], check_paths=False).env


@pytest.mark.parametrize("game, opponent", [("connect_four", "mcts"), ("kuhn_poker", "random"),
                                            ("tic_tac_toe", "alpha_beta")])
def test_games_pass_check_env(game, opponent):
    cfg = _env_cfg(f"env.game={game}", f"env.opponent={opponent}", "env.mcts_simulations=8",
                   "env.search_depth=9")
    check_spec(resolve_env("openspiel"), cfg, seeds=range(4))


def test_perfect_play_draws_against_alpha_beta_and_illegal_numbers_end_the_game():
    spec = resolve_env("openspiel")
    cfg = _env_cfg("env.game=tic_tac_toe", "env.opponent=alpha_beta", "env.search_depth=9")
    for seed in range(4):  # the bot against itself, through the agent's tool: always a draw
        env = spec.make(cfg)
        env.reset(seed)
        from arl.envs.openspiel_env import _AlphaBetaBot

        bot, step = _AlphaBetaBot(env.game, 9), None
        while step is None or not step.terminated:
            number = env.state.legal_actions().index(bot.step(env.state)) + 1
            step = env.step(ToolCall("play", {"action": number}))
        assert step.outcome.kind == "draw" and step.reward == 0.0
    env = spec.make(cfg)
    env.reset(0)
    step = env.step(ToolCall("play", {"action": 10}))  # beyond the 9 distinct actions
    assert step.terminated and step.outcome.kind == "invalid" and step.reward == -1.0
    env.reset(0)
    step = env.step(ToolCallError(ToolCallErrorKind.MALFORMED, "not JSON"))
    assert step.outcome.result == "invalid" and "malformed" in step.messages[0].content


def test_config_refuses_what_the_adapter_cannot_play():
    with pytest.raises(ConfigError, match="env.game"):
        _env_cfg("env.game=no_such_game")
    with pytest.raises(ConfigError, match="env.opponent.*alpha_beta"):
        _env_cfg("env.game=kuhn_poker", "env.opponent=alpha_beta")
    with pytest.raises(ConfigError, match="env.game.*two-player"):
        _env_cfg("env.game=leduc_poker(players=3)")


@pytest.mark.slow  # make test-slow (CI runs it, with the extra installed)
def test_trains_three_steps_on_ray(tmp_path, warm_model_dir):
    from arl.app.train import train

    cfg = ci_config(warm_model_dir, tmp_path, "env.name=openspiel", "env.game=kuhn_poker",
                    "rollout.max_turns=2", "env.tool_name=choose_square",
                    "env.tool_arg=square", "eval.every=3", "eval.opponents=[random]",
                    "eval.games=2", "eval.positions=[]")
    train(cfg)
    rows = metrics_rows(tmp_path / "ci", untimed=False)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows:
        assert sum(row[f"rollout/outcome_{k}"] for k in ("win", "draw", "loss", "invalid")) == 1
    assert "eval/random_as_X_win" in rows[-1] and "eval/random_as_O_nonloss" in rows[-1]


def test_reference_players_score_what_openspiel_computes_exactly():
    """Against the random bot, over fresh hands of Kuhn poker: the random player breaks
    even and the perfect player earns the best response's exact +0.458 a hand (bench/
    openspiel_baselines.py), within the sampling error of 2,000 hands."""
    from arl.config import load_config
    from arl.rollout.reference import play_reference

    env = load_config(["configs/kuhn_poker_openspiel.yaml"], check_paths=False).env
    random_play = [p.reward for p in play_reference(env, "random", 2000, seed=1)]
    perfect = [p.reward for p in play_reference(env, "perfect", 2000, seed=1)]
    assert abs(np.mean(random_play)) < 0.08
    assert abs(np.mean(perfect) - 0.458) < 0.08
    with pytest.raises(ValueError, match="random bot"):
        play_reference(dataclasses.replace(env, opponent="mcts"), "perfect", 1, seed=1)


def _kuhn_group(stream: str, seed: int) -> list[tuple[int, list[int]]]:
    """The agent's seat and the whole history (deal first) of a group's 8 hands of Kuhn
    poker in which the agent always bets or calls."""
    from arl.env_spec import EnvContext

    spec = resolve_env("openspiel")
    cfg = _env_cfg("env.game=kuhn_poker", "env.opponent=random", f"env.opponent_stream={stream}")
    hands = []
    for variant in range(8):
        env = spec.make(cfg, EnvContext(variant=variant))
        env.reset(seed)
        step = None
        while step is None or not step.terminated:
            step = env.step(ToolCall("play", {"action": len(env.state.legal_actions())}))
        hands.append((env.agent, env.state.history()))
    return hands


def test_opponent_stream_episode_keeps_the_deal_and_draws_the_bot_per_hand():
    for seed in range(4):  # group: one bot seed, so the same play meets the same replies
        assert len({(seat, tuple(h)) for seat, h in _kuhn_group("group", seed)}) == 1
    differ = 0
    for seed in range(4):
        hands = _kuhn_group("episode", seed)
        assert len({(seat, tuple(h[:2])) for seat, h in hands}) == 1  # seat and both cards
        differ += len({tuple(h) for _, h in hands}) > 1
    assert differ >= 3  # the bot's replies now vary within a group (all 8 alike: p <= 1/128)
