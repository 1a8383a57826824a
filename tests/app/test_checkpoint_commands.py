"""Checkpoints a person can use: `arl eval` finds them from a run directory, `latest` or
step_<n>, from any working directory; `arl export` writes a model folder that transformers
loads unchanged and that plays the same greedy moves; old checkpoints are pruned."""

from __future__ import annotations

import json
import os

import pytest

from arl.app.cli import main
from arl.errors import UserError
from arl.model.checkpoint.runs import resolve_checkpoint
from arl.model.checkpoint.store import MANIFEST_FILE, load_checkpoint, model_files
from tests.builders import learner_checkpoint


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, warm_model_dir):
    root = tmp_path_factory.mktemp("run") / "myrun"
    learner_checkpoint(warm_model_dir, root / "checkpoints" / "step_000001")
    (root / "config.json").write_text('{"run_name": "myrun"}')  # as every run writes
    return root


def test_checkpoint_found_from_run_dir_latest_and_step(run_dir):
    step = str(run_dir / "checkpoints" / "step_000001")
    for given in (run_dir, run_dir / "checkpoints", run_dir / "checkpoints" / "latest", step):
        assert resolve_checkpoint(str(given)) == step


def test_a_cached_model_is_named_like_in_a_config(warm_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ARL_HOME", str(tmp_path))
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine").symlink_to(warm_model_dir)
    assert resolve_checkpoint("cache:mine") == str(tmp_path / "models" / "mine")
    with pytest.raises(UserError, match="no checkpoint, run directory or model folder"):
        resolve_checkpoint("cache:absent")
    with pytest.raises(UserError, match="name a model inside the cache"):
        resolve_checkpoint("cache:../mine")


def test_checkpoint_is_self_contained(run_dir, tmp_path, monkeypatch, capsys):
    ckpt = run_dir / "checkpoints" / "step_000001"
    files = model_files(ckpt)
    assert "tokenizer.json" in files and "config.json" in files
    assert not [n for n in files if n.endswith(".safetensors")]  # the weights are the learner's
    load_checkpoint(ckpt)  # hashes of hf/ included
    monkeypatch.chdir(tmp_path)  # from another directory: nothing relative to the run
    positions = tmp_path / "p.jsonl"
    positions.write_text('{"board": "XX.OO....", "to_move": "X", "good_moves": [3]}\n')
    assert main(["eval", "--checkpoint", str(run_dir / "checkpoints" / "latest"),
                 "--positions", str(positions), "--max-new-tokens", "24"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["positions"] == 1


def test_tampered_model_file_in_a_checkpoint_is_refused(run_dir, tmp_path):
    import shutil

    from arl.model.checkpoint.store import CheckpointError

    copy = tmp_path / "step_000001"
    shutil.copytree(run_dir / "checkpoints" / "step_000001", copy)
    (copy / "hf" / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="config.json"):
        load_checkpoint(copy)


def _greedy_squares(engine, n: int = 20) -> list:
    from arl.envs.registry import env_config, make_env
    from arl.episode import run_episodes
    from arl.rollout.evaluation import _renderer
    from arl.types import SamplingParams

    starts = [(make_env(env_config()), 500 + i, i) for i in range(n)]
    played = run_episodes(engine, _renderer(engine), starts, SamplingParams(0.0, 1.0, 32, 0), 1)
    return [t.outcome for t in played]


@pytest.mark.parametrize("lora", [0, 4])
def test_export_loads_with_transformers_and_plays_like_eval(lora, warm_model_dir, tmp_path,
                                                            capsys):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from arl.rollout.engines.hf import HFEngine
    from arl.rollout.evaluation import load_policy

    ckpt = learner_checkpoint(warm_model_dir, tmp_path / "run" / "checkpoints" / "step_000001",
                               lora=lora)
    out = tmp_path / "exported"
    assert main(["export", str(tmp_path / "run"), str(out)]) == 0
    assert "exported" in capsys.readouterr().out
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert tokenizer.chat_template and not any(".lora_" in n for n, _ in model.named_parameters())
    trained = load_checkpoint(ckpt).state.model
    if not lora:  # the exported weights are the learner's, bit for bit
        for name, param in model.named_parameters():
            assert torch.equal(param, trained[name]), name
    exported = _greedy_squares(HFEngine(str(out), dtype="float32"))
    assert exported == _greedy_squares(load_policy(str(ckpt), "float32"))
    base = _greedy_squares(HFEngine(warm_model_dir, dtype="float32"))
    assert len(set(exported)) > 1 and os.path.isfile(out / "config.json") and base


def test_export_refuses_a_full_folder(run_dir, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert main(["export", str(run_dir), str(tmp_path / "full")]) == 2


def test_keep_checkpoints_prunes_all_but_the_newest(tmp_path, warm_model_dir):
    from arl.app.run import Run
    from arl.config import load_config

    cfg = load_config(["configs/ci.yaml"], [f"model.path={warm_model_dir}",
                                            f"output_dir={tmp_path}"])
    with Run(cfg, progress=False) as run:
        for step in (1, 2, 3, 4):
            learner_checkpoint(warm_model_dir, run.checkpoint_dir(step))
        removed = run.prune_checkpoints(2)
        left = sorted(os.listdir(os.path.join(run.dir, "checkpoints")))
    assert [os.path.basename(r) for r in removed] == ["step_000001", "step_000002"]
    assert left == ["latest", "step_000003", "step_000004"]
    assert os.path.isfile(os.path.join(run.dir, "checkpoints", "step_000004", MANIFEST_FILE))


def test_a_run_starts_from_another_runs_checkpoint(run_dir, warm_model_dir, tmp_path,
                                                   monkeypatch):
    """model.path may name a run (its newest checkpoint): exported once into the cache, with
    the learner's weights bit for bit; a model folder stays what it is."""
    import torch
    from transformers import AutoModelForCausalLM

    from arl.model.source import local_folder

    monkeypatch.setenv("ARL_HOME", str(tmp_path))
    ckpt = run_dir / "checkpoints" / "step_000001"
    folder = local_folder(str(run_dir))
    assert folder.startswith(str(tmp_path / "models" / "checkpoints" / "myrun-step_000001-"))
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    trained = load_checkpoint(ckpt).state.model
    for name, param in model.named_parameters():
        assert torch.equal(param, trained[name]), name
    written = os.path.getmtime(os.path.join(folder, "model.safetensors"))
    for given in (run_dir / "checkpoints", ckpt):  # the same checkpoint: the same folder
        assert local_folder(str(given)) == folder
    assert os.path.getmtime(os.path.join(folder, "model.safetensors")) == written
    assert local_folder(warm_model_dir) == os.path.abspath(warm_model_dir)
    assert main(["plan", "configs/tictactoe_move.yaml", f"model.path={run_dir}"]) in (0, 1)
