"""A user's own env, from outside the package: examples/guess_number.py passes check_env and
trains with `arl train ... env.name=examples.guess_number:make` on a real local Ray cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from arl.config import ConfigError, load_config
from arl.env_spec import resolve_env
from arl.envs.check import check_spec
from tests.builders import metrics_rows

ROOT = Path(__file__).resolve().parents[2]
NAME = "examples.guess_number:make"


def test_example_env_passes_check_env_and_its_keys_are_typed():
    cfg = load_config([str(ROOT / "configs/ci.yaml")], [f"env.name={NAME}", "env.high=50"],
                      check_paths=False)
    assert type(cfg.env).__name__ == "GuessConfig" and cfg.env.high == 50
    spec = resolve_env(NAME)
    assert spec.outcomes == ("found", "missed", "invalid")
    check_spec(spec, cfg.env, seeds=range(20))
    with pytest.raises(ConfigError, match="env.hihg.*unknown key of env.*did you mean 'env.high'"):
        load_config([], [f"env.name={NAME}", "env.hihg=3"], check_paths=False)


def test_example_env_trains_from_outside_the_package(tmp_path, warm_model_dir):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ARL_HOME": str(tmp_path / "home")}
    cmd = [sys.executable, "-m", "arl.app.cli", "train", str(ROOT / "configs/ci.yaml"),
           f"env.name={NAME}", f"model.path={warm_model_dir}", f"output_dir={tmp_path}",
           "rollout.max_turns=3", "ray.address=local", "wandb.mode=offline"]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    rows = metrics_rows(tmp_path / "ci", untimed=False)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows:  # the env's own outcome kinds, and the learner did its work
        kinds = [row[f"rollout/outcome_{k}"] for k in ("found", "missed", "invalid")]
        assert sum(kinds) == pytest.approx(1.0)
        assert row["learner/loss"] is not None and row["rollout/turns_per_episode"] >= 1


def _episode(cfg, secret_seed: int, guesses: list[int]):
    """The steps of one guess_number episode with these guesses (stops where it ends)."""
    from arl.types import ToolCall

    env = resolve_env(NAME).make(cfg)
    env.reset(secret_seed)
    steps = []
    for number in guesses:
        steps.append(env.step(ToolCall("guess", {"number": number})))
        if steps[-1].terminated:
            break
    return env, steps


def _cfg(*overrides: str):
    return load_config([], [f"env.name={NAME}", *overrides], check_paths=False).env


def test_guess_hints_restate_the_interval_and_shaping_pays_bits_narrowed():
    import math

    cfg = _cfg("env.reward_per_bit=0.5", "env.shaping=realized")
    env, _ = _episode(cfg, 0, [])
    secret = env.secret
    wrong = 1 if secret != 1 else 20
    _, steps = _episode(cfg, 0, [wrong, wrong, secret])
    text = steps[0].messages[0].content
    low, high = (2, 20) if wrong == 1 else (1, 19)
    assert text == f"{wrong}: {'higher' if wrong == 1 else 'lower'}, so {low} to {high}. " \
                   "4 guesses left."
    assert steps[0].reward == pytest.approx(0.5 * math.log2(20 / 19))
    assert steps[1].reward == 0.0  # a guess outside the interval teaches nothing
    # Potential-based: the bits add up to all log2(20) of them once the number is found.
    shaping = sum(s.reward for s in steps) - (1.0 - 0.1 * 2)
    assert shaping == pytest.approx(0.5 * math.log2(20))
    plain = _cfg("env.show_interval=false")
    _, steps = _episode(plain, 0, [wrong])
    assert steps[0].messages[0].content.count(",") == 0 and steps[0].reward == 0.0


def test_guess_reference_players_are_random_legal_and_binary_search():
    from arl.rollout.reference import play_reference

    cfg = _cfg()
    perfect = play_reference(cfg, "perfect", 200, 10**9)
    assert all(p.outcome.kind == "found" and p.turns <= 5 for p in perfect)
    assert 3.4 < sum(p.turns for p in perfect) / 200 < 4.0  # binary search on 1..20: 3.7
    random_ = play_reference(cfg, "random", 400, 10**9)
    found = sum(p.outcome.kind == "found" for p in random_) / 400
    assert 0.15 < found < 0.31  # 1 - (19/20)^5 = 0.226 with repeats; whole-range guesses


def test_guess_expected_shaping_pays_the_mean_bits_whatever_the_number():
    import math

    cfg = _cfg("env.reward_per_bit=1.0")  # shaping: expected (the default)
    first = set()
    for seed in range(40):  # many hidden numbers: a wrong first guess of 10 pays alike
        env, steps = _episode(cfg, seed, [10])
        if env.secret != 10:
            first.add(round(steps[0].reward, 9))
    # log2(20) - (9/20 log2 9 + 10/20 log2 10): the middle beats the ends (0.286 bits).
    assert first == {round(math.log2(20) - 0.45 * math.log2(9) - 0.5 * math.log2(10), 9)}
    _, steps = _episode(cfg, 0, [1, 1])
    assert steps[0].reward == pytest.approx(math.log2(20) - 0.95 * math.log2(19))
    if not steps[0].terminated:
        assert steps[1].reward == 0.0  # outside the interval: nothing to learn
