"""`arl doctor` and `arl plan` on a good and a bad setup."""

from __future__ import annotations

import json
import socket

from arl.app.cli import main
from arl.app.plan import GIB, Machine, ModelShape, items, model_shape, pools, report
from arl.config import load_config

CI = "configs/ci.yaml"


def test_doctor_passes_on_a_good_setup(warm_model_dir, capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["doctor", CI, f"model.path={warm_model_dir}", "ray.address=local"]) == 0
    out = capsys.readouterr().out
    for name in ("python", "torch", "transformers", "ray", "wandb", "cpu", "gpu", "memory",
                 "config", "model"):
        assert f"ok   {name}" in out, name
    assert "no problems found" in out and "vllm" in out and "deepspeed" in out


def test_doctor_lists_every_problem_of_a_bad_setup(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc with a wandb key
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ["doctor", CI, f"model.path={tmp_path / 'missing'}", "wandb.mode=online",
            f"ray.address=127.0.0.1:{port}"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "3 problem(s)" in out
    assert "wandb: mode online, no key" in out and "WANDB_API_KEY" in out
    assert f"ray: cluster at 127.0.0.1:{port} does not answer" in out
    assert "model: " in out and "does not exist" in out
    assert main(["doctor", CI, "rollout.group_size=1"]) == 1  # a config error is a problem too
    assert "rollout.group_size" in capsys.readouterr().out
    # A warm start not built yet: the hint names the config that builds that one.
    monkeypatch.setenv("ARL_HOME", str(tmp_path))
    assert main(["doctor", CI, "model.path=cache:tiny-warmstart-board"]) == 1
    assert "arl warmstart configs/warmstart_board.yaml" in capsys.readouterr().out


def test_doctor_never_prints_the_wandb_key(warm_model_dir, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "canary-key-0123456789")
    main(["doctor", CI, f"model.path={warm_model_dir}", "wandb.mode=online",
          "ray.address=local"])
    out = capsys.readouterr().out
    assert "a key is set" in out and "canary-key" not in out


def test_plan_counts_the_real_parameters_and_scales_with_the_knobs(warm_model_dir):
    from arl.model.causal_lm import load_model

    shape = model_shape(warm_model_dir)
    model, _ = load_model(warm_model_dir, "float32")
    assert shape.params == sum(p.numel() for p in model.parameters())
    cfg = load_config([CI], [f"model.path={warm_model_dir}"])
    bigger = load_config([CI], [f"model.path={warm_model_dir}",
                                "learner.compute.micro_batch_size=8"])

    def by_name(c):
        return {i.name: i.bytes for i in items(c, shape, 100)}

    assert by_name(bigger)["learner activations"] == 2 * by_name(cfg)["learner activations"]
    assert by_name(cfg)["learner AdamW moments (fp32, full)"] == 8 * shape.params
    # LoRA: gradients and moments for the adapters only, and the exact adapter size.
    lora = load_config([CI], [f"model.path={warm_model_dir}", "learner.lora.rank=4"])
    lora_shape = model_shape(warm_model_dir, lora.learner.lora.target_modules)
    items_lora = {i.name: i.bytes for i in items(lora, lora_shape, 100)}
    from arl.model.lora import apply_lora

    peft_model = apply_lora(model, lora.learner.lora)
    adapters = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert items_lora["learner AdamW moments (fp32, lora)"] == 8 * adapters
    # DeepSpeed: a learner rank holds 1/M of what its ZeRO stage partitions.
    for stage, sharded in ((1, {"moments"}), (2, {"moments", "gradients"}),
                           (3, {"moments", "gradients", "weights"})):
        zero = by_name(load_config([CI], [
            f"model.path={warm_model_dir}", "learner.resources.backend=deepspeed",
            "learner.resources.num_workers=4", f"learner.resources.zero_stage={stage}"]))
        full = by_name(cfg)
        for what, key in (("weights", "learner weights (fp32"),
                          ("gradients", "learner gradients (fp32, full"),
                          ("moments", "learner AdamW moments (fp32, full")):
            got = next(v for k, v in zero.items() if k.startswith(key))
            assert got == full[f"{key})"] // (4 if what in sharded else 1), (stage, what)


def test_plan_pools_split_on_a_gpu_and_sum_on_unified_memory():
    shape = ModelShape(params=500_000_000, layers=24, hidden=896, heads=14, kv_heads=2,
                       head_dim=64, vocab=151_936)
    cfg = load_config([CI], check_paths=False)
    plan_items = items(cfg, shape, 200)
    total = sum(i.bytes for i in plan_items)
    split = pools(Machine(64 * GIB, 24 * GIB), plan_items)
    assert set(split) == {"gpu", "host"} and split["gpu"][0] + split["host"][0] == total
    assert pools(Machine(128 * GIB, unified=True), plan_items) == {"unified": (total, 128 * GIB)}
    lines, summary, fits = report(cfg, shape, Machine(4 * GIB, 2 * GIB), 200)
    assert not fits and not summary["fits"]
    assert any("gpu pool does not fit" in line and "turn " in line for line in lines)


def test_arl_plan_fits_here_and_warns_on_a_small_machine(warm_model_dir, capsys):
    assert main(["plan", CI, f"model.path={warm_model_dir}"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["fits"] and summary["pools_gib"]["host"]["planned"] > 0
    assert main(["plan", CI, "--memory-gb", "0.5", f"model.path={warm_model_dir}"]) == 1
    out = capsys.readouterr().out
    assert "WARNING: the host pool does not fit" in out and "turn " in out


def test_plan_of_an_architecture_only_folder_with_vllm_on_a_gpu(capsys):
    """configs/gpu_one.yaml against a 24 GB GPU: the parameter count comes from config.json
    alone, vLLM's item is its reservation of the GPU, and a 1.7B model trained in full does
    not fit while LoRA does."""
    args = ["plan", "configs/gpu_one.yaml", "--prompt-tokens", "400", "--gpu-memory-gb", "24",
            "--memory-gb", "64"]
    assert main([*args, "model.path=configs/models/qwen2.5-0.5b-instruct"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    assert 490e6 < summary["params"] < 500e6  # Qwen2.5-0.5B: 494M with tied embeddings
    assert summary["items_gib"]["rollout vLLM reservation x1"] == round(0.3 * 24, 4)
    assert summary["sequence_tokens"] == 400 + 256
    assert main([*args, "model.path=configs/models/qwen3-1.7b"]) == 1
    assert "turn learner.lora.rank" in capsys.readouterr().out
    assert main([*args, "model.path=configs/models/qwen3-1.7b", "learner.lora.rank=16",
                 "learner.compute.micro_batch_size=1"]) == 0


def test_the_vllm_kv_cache_is_sized_in_bytes_from_the_plan(capsys):
    """configs/spark.yaml on a GB10 (about 121.7 GiB of unified memory as it reports it):
    the plan prints the largest KV cache that keeps the pool within its headroom, and a run
    given that size (rollout.vllm.gpu_kv_cache_gib) plans to exactly that headroom."""
    from arl.app.plan import HEADROOM, largest_gpu_kv_cache

    args = ["plan", "configs/spark.yaml", "--prompt-tokens", "400", "--unified-memory-gb",
            "121.7", "model.path=configs/models/qwen3-1.7b"]
    main(args)
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    kv_gib = summary["largest_gpu_kv_cache_gib"]
    assert kv_gib > 1
    assert main([*args, f"rollout.vllm.gpu_kv_cache_gib={kv_gib}"]) == 0
    sized = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sized["items_gib"]["rollout vLLM KV cache x1"] == kv_gib
    planned = sized["pools_gib"]["unified"]
    assert abs(planned["planned"] - HEADROOM * 121.7) < 0.02  # the rounding of kv_gib
    shape = ModelShape(params=500_000_000, layers=24, hidden=896, heads=14, kv_heads=2,
                       head_dim=64, vocab=151_936)
    cpu = Machine(64 * GIB)
    assert largest_gpu_kv_cache(load_config([CI], check_paths=False), shape, cpu, 200) is None


def test_the_vllm_engine_takes_a_kv_cache_size_on_a_gpu_only():
    from arl.rollout.engines.vllm import cache_size

    assert cache_size(True, 5 * GIB) == {"kv_cache_memory_bytes": 5 * GIB}
    assert cache_size(True, 0) == {} and cache_size(False, 5 * GIB) == {}
