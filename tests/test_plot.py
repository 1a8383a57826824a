"""The run plot: the reward's trailing mean, and a PNG drawn from a metrics file."""

from __future__ import annotations

import json

from arl.plot import plot_run, trailing_mean


def test_trailing_mean_averages_up_to_window_values():
    assert trailing_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert trailing_mean([2.0, 4.0], 10) == [2.0, 3.0]
    assert trailing_mean([], 3) == []


def test_plot_run_writes_a_png(tmp_path):
    rows = [{"step": i, "rollout/reward_mean": i / 10, "learner/loss": 0.1} for i in range(12)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = plot_run(str(tmp_path))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
