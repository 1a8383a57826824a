"""Evaluation during training: every `eval.every` steps (and after the last), greedy games and
positions through the code `arl eval` runs, logged as eval/* in metrics.jsonl."""

from __future__ import annotations

from arl.actors.hosts import LocalHost
from arl.app.train import train
from tests.builders import ci_config, metrics_rows


def test_eval_metrics_appear_in_metrics_jsonl(tmp_path, warm_model_dir):
    cfg = ci_config(warm_model_dir, tmp_path, "eval.every=2", "eval.games=2",
                    "eval.opponents=[minimax,random]")
    train(cfg, host=LocalHost())
    rows = metrics_rows(tmp_path / "ci", untimed=False)
    evaluated = [r["step"] for r in rows if "eval/minimax_as_X_draw" in r]
    assert evaluated == [1, 2]  # every 2 steps, and after the last (3 steps)
    row = rows[1]
    for opponent in ("minimax", "random"):
        for seat in ("X", "O"):
            rates = [row[f"eval/{opponent}_as_{seat}_{o}"] for o in ("win", "draw", "loss",
                                                                     "illegal")]
            assert abs(sum(rates) - 1.0) < 1e-9  # every game ends one way
            assert row[f"eval/{opponent}_as_{seat}_nonloss"] == rates[0] + rates[1]
            assert -1.0 <= row[f"eval/{opponent}_as_{seat}_reward"] <= 1.0
    for name in ("win_in_one", "block_in_one"):
        assert 0.0 <= row[f"eval/{name}_accuracy"] <= 1.0
    assert row["eval/policy_version"] == 2.0  # the weights after step 1's update
    assert "timing/eval" in row and "eval/minimax_as_X_draw" not in rows[0]
