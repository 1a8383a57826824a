"""The TextArena adapter: conformance on three games (two board games, one not), TextArena's
invalid-move rules, and 3 GSPO steps on Ray."""

from __future__ import annotations

import pytest

pytest.importorskip("textarena", reason="the textarena extra: pip install -e '.[textarena]'")

from arl.config import ConfigError, load_config  # noqa: E402
from arl.env_spec import EnvContext, resolve_env  # noqa: E402
from arl.envs.check import check_spec  # noqa: E402
from arl.types import ToolCall, ToolCallError, ToolCallErrorKind  # noqa: E402
from tests.builders import CI, ci_config, metrics_rows  # noqa: E402


def _env_cfg(*overrides: str):
    return load_config([CI], ["env.name=textarena", *overrides], check_paths=False).env


@pytest.mark.parametrize("overrides", [
    ("env.game=TicTacToe-v0-raw", "env.opponent=minimax"),
    ("env.game=ConnectFour-v0-raw",),
    ("env.game=GuessTheNumber-v0-raw", "env.num_players=1"),
])
def test_games_pass_check_env(overrides):
    check_spec(resolve_env("textarena"), _env_cfg(*overrides), seeds=range(3))


def test_invalid_moves_follow_textarena_rules():
    env = resolve_env("textarena").make(_env_cfg("env.game=TicTacToe-v0-raw", "env.seat=0"))
    env.reset(0)
    first = env.step(ToolCallError(ToolCallErrorKind.MALFORMED, "not JSON"))
    assert not first.terminated  # TextArena's error allowance: one more try
    assert first.messages[0].content.startswith("Invalid tool call: not JSON.")
    assert "invalid move" in first.messages[0].content
    last = env.step(ToolCall("play", {"move": "[42]"}))
    assert last.terminated and last.outcome.kind == "invalid" and last.reward == -1.0


def test_minimax_opponent_never_loses():
    spec = resolve_env("textarena")
    for seed in range(6):
        env = spec.make(_env_cfg("env.game=TicTacToe-v0-raw", "env.opponent=minimax"))
        env.reset(seed)
        step = None
        while step is None or not step.terminated:
            from arl.envs.textarena_env import _core, _tictactoe_moves

            step = env.step(ToolCall("play", {"move": _tictactoe_moves(_core(env.env).state)[0]}))
        assert step.outcome.kind in ("loss", "draw")


def make_agent():
    """A TextArena agent, as `env.opponent_agent` names one: observation text -> move."""
    def agent(observation: str) -> str:
        assert "Board" in observation  # it sees its own view of the game
        return "[col 6]"
    return agent


def test_a_textarena_agent_is_the_opponent():
    cfg = _env_cfg("env.game=ConnectFour-v0-raw", "env.opponent=agent", "env.seat=0",
                   f"env.opponent_agent={__name__}:make_agent")
    env = resolve_env("textarena").make(cfg)
    env.reset(0)
    step = None
    while step is None or not step.terminated:
        step = env.step(ToolCall("play", {"move": "[col 0]"}))
    assert step.outcome.kind == "win"  # four in column 0 before the agent's four in column 6


def test_self_play_asks_the_snapshot_with_the_opponents_view():
    cfg = _env_cfg("env.game=TicTacToe-v0-raw", "env.opponent=policy", "env.seat=0")
    asked = []

    def choose(prompt, calls, rng):  # the snapshot's chooser: the last legal move
        asked.append((prompt, calls))
        return len(calls) - 1

    spec = resolve_env("textarena")
    assert spec.self_play(cfg).refresh_every == cfg.opponent_refresh_every
    env = spec.make(cfg, EnvContext(opponent=spec.self_play(cfg).opponent(choose)))
    env.reset(0)
    step = env.step(ToolCall("play", {"move": "[0]"}))
    prompt, calls = asked[0]
    assert calls[-1] == ToolCall("play", {"move": "[8]"}) and len(calls) == 8
    assert "Player 1" in prompt.messages[1].content and "placed their symbol" in \
        prompt.messages[1].content  # the opponent's own view, the agent's move in it
    assert not step.terminated and "cell 8" in step.messages[0].content


def test_config_refuses_unknown_games_and_opponents():
    with pytest.raises(ConfigError, match="env.game"):
        _env_cfg("env.game=NoSuchGame-v0")
    with pytest.raises(ConfigError, match="env.opponent"):
        _env_cfg("env.game=ConnectFour-v0-raw", "env.opponent=minimax")
    with pytest.raises(ConfigError, match="env.opponent_agent"):
        _env_cfg("env.opponent=agent", "env.opponent_agent=no.such:thing")


@pytest.mark.slow  # make test-slow (CI runs it, with the extra installed)
def test_trains_three_steps_on_ray(tmp_path, warm_model_dir):
    from arl.app.train import train

    cfg = ci_config(warm_model_dir, tmp_path, "env.name=textarena", "rollout.max_turns=3",
                    "env.game=TicTacToe-v0-raw")
    train(cfg)
    rows = metrics_rows(tmp_path / "ci", untimed=False)
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert all(r["learner/loss"] is not None for r in rows)
