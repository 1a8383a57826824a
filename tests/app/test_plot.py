"""The run plot: the reward's trailing mean, and a PNG drawn from a metrics file."""

from __future__ import annotations

import json

from arl.app.plot import PANELS, plot_run, trailing_mean


def test_trailing_mean_averages_up_to_window_values():
    assert trailing_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert trailing_mean([2.0, 4.0], 10) == [2.0, 3.0]
    assert trailing_mean([], 3) == []


def test_plot_run_writes_a_png_with_every_panel_drawn(tmp_path):
    from matplotlib import image

    # A prefix key ("rollout/outcome_*") is drawn from any metric under it: name one.
    keys = [key.replace("*", "x") for panel in PANELS for key in panel.keys + panel.right]
    rows = [{"step": i, **{k: (i % 5) / 10 + j / 100 for j, k in enumerate(keys)},
             "gspo/ratio_hist": {"edges": [0.9, 1.1], "counts": [3]}} for i in range(12)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = plot_run(str(tmp_path))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    pixels = image.imread(path)[..., :3]  # [H, W, 3] floats in 0..1
    assert pixels.std() > 0.05, "a blank image"
    # Every panel has a curve: each of the 3 x 4 cells holds coloured pixels.
    height, width = pixels.shape[:2]
    assert len(PANELS) == 12
    for row in range(3):
        for col in range(4):
            cell = pixels[row * height // 3:(row + 1) * height // 3,
                          col * width // 4:(col + 1) * width // 4]
            colour = cell.max(axis=-1) - cell.min(axis=-1)
            assert (colour > 0.3).mean() > 0.001, f"panel {row},{col} has no curve"
