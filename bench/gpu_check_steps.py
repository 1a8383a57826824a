"""The steps of `make gpu-check` (bench/gpu_check.py), each a function of the run's Context
that returns its figures, raises Skip (one line: why it cannot run here) or fails with an
exception. On the CPU (`--cpu`) each step runs the same code with the HF engine, gloo and
the CPU learner where its path allows; what needs a GPU is skipped."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_SYNC_S = 0.15  # a peer's weight-sync time for a 0.5B-parameter model on one GPU


class Skip(Exception):
    """The step cannot run on this machine (the message says why, in one line)."""


@dataclass
class Context:
    device: str  # cuda | cpu
    scratch: str  # a folder for models and runs, removed after the check
    model: str = ""  # the training step's model ("" : one built here)
    versions: dict = field(default_factory=dict)
    _built: dict = field(default_factory=dict)

    @property
    def gpu(self) -> bool:
        return self.device == "cuda"

    @property
    def gpus(self) -> int:
        import torch

        return torch.cuda.device_count() if self.gpu else 0

    @property
    def dtype(self) -> str:
        return "bfloat16" if self.gpu else "float32"

    def machine(self) -> str:
        import torch

        if not self.gpu:
            return f"CPU ({platform.machine()}, {os.cpu_count()} cores; --cpu)"
        names = [torch.cuda.get_device_name(i) for i in range(self.gpus)]
        return f"{len(names)} x {names[0]} ({platform.machine()})"

    def built_model(self, name: str, hidden: int, layers: int, heads: int) -> str:
        """A model of that shape built here from a config (random weights, the tiny
        tokenizer), once per run: nothing is downloaded."""
        if name not in self._built:
            from arl.model.tiny import build_tiny_model, build_tokenizer, save_model_dir
            from arl.warmstart.demos import corpus_texts

            path = os.path.join(self.scratch, "models", name)
            tokenizer = build_tokenizer(corpus_texts(seed=0), 400)
            model = build_tiny_model(tokenizer, hidden, layers, heads, seed=0)
            save_model_dir(model, tokenizer, path)
            self._built[name] = (path, sum(p.numel() for p in model.parameters()))
        return self._built[name][0]

    def params(self, name: str) -> int:
        return self._built[name][1]

    def tiny(self) -> str:
        return self.built_model("tiny", 128, 4, 4)

    def engine(self, path: str, share: float = 0.25):
        """The rollout engine a run would use here: vLLM on the GPU, HF on the CPU."""
        from arl.config import ModelConfig, RolloutConfig, VllmConfig
        from arl.rollout.engines.registry import make_engine

        rollout = RolloutConfig(engine="vllm" if self.gpu else "hf",
                                vllm=VllmConfig(gpu_memory_utilization=share))
        return make_engine(ModelConfig(path, self.dtype), rollout)

    def train(self, steps: int, *overrides: str) -> list[dict]:
        """`arl train configs/gpu_one.yaml` for `steps` steps (on the CPU: the HF engine, a
        small batch); its metrics rows."""
        out = os.path.join(self.scratch, f"runs-{len(os.listdir(self.scratch))}")
        cpu = [] if self.gpu else [
            "rollout.engine=hf", "rollout.gpus_per_worker=0", "learner.resources.gpus=0",
            "rollout.groups_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=16",
            "rollout.cpus_per_worker=1", "learner.resources.cpus=1", "model.dtype=float32"]
        arl = os.path.join(os.path.dirname(sys.executable), "arl")
        command = [arl, "train", "configs/gpu_one.yaml", f"steps={steps}",
                   f"model.path={self.model or self.tiny()}", f"output_dir={out}",
                   "wandb.mode=disabled", "learner.checkpoint.every=0", "ray.address=local",
                   *cpu, *overrides]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()
            raise RuntimeError(f"arl train exited {done.returncode}: "
                               f"{tail[-1] if tail else ''}")
        with open(os.path.join(out, "gpu_one", "metrics.jsonl"), encoding="utf-8") as f:
            return [json.loads(line) for line in f]


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    needs: str
    run: Callable[[Context], dict]


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def reload_signature() -> str:
    """vLLM's reload_weights signature (arl/rollout/engines/vllm.py), or why there is none."""
    try:
        from arl.rollout.engines.vllm import reload_signature as signature

        return signature()
    except ImportError as err:
        return f"absent ({err})"


def check_versions(ctx: Context) -> dict:
    import torch

    from arl.rollout.engines.vllm import VLLM_FLOOR

    ctx.versions = {name: _version(name) for name in
                    ("arl", "torch", "transformers", "ray", "vllm", "deepspeed")}
    ctx.versions.update(python=platform.python_version(), cuda=str(torch.version.cuda))
    signature = reload_signature()
    if ctx.gpu:
        ctx.versions["gpus"] = [
            f"{torch.cuda.get_device_name(i)}, "
            f"{torch.cuda.get_device_properties(i).total_memory / 2**30:.1f} GiB"
            for i in range(ctx.gpus)]
        if ctx.versions["vllm"] == "absent":
            raise RuntimeError("vLLM is not installed: pip install -e '.[vllm]'")
        if "weights_iterator" not in signature:
            raise RuntimeError(f"vLLM {ctx.versions['vllm']} has no reload_weights("
                               f"weights_iterator=...) ({signature}): arl needs "
                               f"vllm>={VLLM_FLOOR}")
    return {"torch": ctx.versions["torch"], "vllm": ctx.versions["vllm"],
            "reload_weights": signature[:60]}


def gpu_tests(ctx: Context) -> dict:
    if not ctx.gpu:
        raise Skip("needs a CUDA GPU")
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/system/test_gpu.py", "-q",
                           "-m", "gpu or vllm", "-p", "no:cacheprovider"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if done.returncode != 0:
        raise RuntimeError(f"tests/system/test_gpu.py: {last}")
    return {"pytest": last}


def engine_round_trip(ctx: Context) -> dict:
    """Generate, reload the same weights through the engine's one call, generate again: the
    greedy ids must not change."""
    from arl.model.causal_lm import load_model
    from arl.types import SamplingParams

    path = ctx.tiny()
    engine = ctx.engine(path)
    prompts = _prompts(64, 60, seed=0)
    start = time.perf_counter()
    out = engine.generate(prompts, SamplingParams(1.0, 1.0, 32, seed=0))
    tok_s = sum(len(g.token_ids) for g in out) / (time.perf_counter() - start)
    greedy = SamplingParams(0.0, 1.0, 16, seed=0)
    before = [g.token_ids.tolist() for g in engine.generate(prompts[:16], greedy)]
    model, _ = load_model(path, dtype="float32")
    start = time.perf_counter()
    engine.update_weights({k: v.detach() for k, v in model.state_dict().items()}, version=1)
    reload_s = time.perf_counter() - start
    after = [g.token_ids.tolist() for g in engine.generate(prompts[:16], greedy)]
    engine.close()
    if before != after:
        raise RuntimeError("greedy ids changed after reloading the same weights")
    return {"tok_s_b64": round(tok_s), "reload_s": round(reload_s, 3)}


def _prompts(count: int, length: int, seed: int) -> list[list[int]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.integers(10, 390, length).tolist() for _ in range(count)]


def train_steps(ctx: Context) -> dict:
    rows = ctx.train(3)
    if [r["step"] for r in rows] != [0, 1, 2]:
        raise RuntimeError(f"expected steps 0-2 in metrics.jsonl, got {len(rows)} rows")
    if not all(math.isfinite(r["learner/loss"]) for r in rows):
        raise RuntimeError("a non-finite learner loss")
    later = rows[1:]
    return {"step_s": round(statistics.mean(r["timing/step"] for r in later), 2),
            "train_s": round(statistics.mean(r["timing/train"] for r in later), 2),
            "reward": round(rows[-1]["rollout/reward_mean"], 3)}


FIRST_STEPS: list[Step] = [
    Step("versions", "versions, the GPUs, vLLM's reload_weights signature",
         "vllm>=0.16 on a GPU (on the CPU it may be absent)", check_versions),
    Step("gpu-tests", "tests/system/test_gpu.py (learner on CUDA = CPU, vLLM on the GPU)",
         "a CUDA GPU, the vllm extra", gpu_tests),
    Step("engine", "the rollout engine on a model built here: generate, reload, same greedy",
         "vLLM on a GPU (the HF engine with --cpu)", engine_round_trip),
    Step("train", "3 steps of configs/gpu_one.yaml (engine first, then the learner)",
         "a GPU shared by vLLM and the learner (--model: the policy; default built here)",
         train_steps),
]
