"""The later steps of `make gpu-check`: DeepSpeed's dtype, NCCL weight sync, the weight-sync
time of a 0.5B-parameter model, generation against bare vLLM (see bench/gpu_check.py)."""

from __future__ import annotations

import statistics
import time

from gpu_check_steps import PEER_SYNC_S, Context, Skip, Step, _prompts


def _learner(ctx: Context, path: str, **resources):
    from arl.config import LearnerConfig
    from arl.learner.gspo_learner import GSPOLearner
    from arl.schema_learner import ComputeConfig, LearnerResources

    cfg = LearnerConfig(
        compute=ComputeConfig(dtype="bfloat16", micro_batch_size=4),
        resources=LearnerResources(gpus=1.0 if ctx.gpu else 0.0, **resources))
    return GSPOLearner(path, cfg, ctx.dtype, total_steps=10, seed=0)


def _trajectories(count: int, vocab: int, seed: int) -> list:
    import numpy as np

    from arl.types import Trajectory

    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = int(rng.integers(24, 48))
        mask = np.zeros(n, dtype=np.int8)
        mask[12:] = 1
        out.append(Trajectory(
            token_ids=rng.integers(10, vocab, n).astype(np.int32), loss_mask=mask,
            sampler_logprobs=np.where(mask == 1, -3.0, 0.0).astype(np.float32),
            reward=float(i % 2), group_id=i // 4, policy_version=0, num_turns=1,
            num_tool_calls=1, num_invalid_calls=0, episode_id=i))
    return out


def deepspeed_dtype(ctx: Context) -> dict:
    """One ZeRO-3 step with bf16 products: every linear layer but the output head must have
    run in bf16 (DeepSpeed turns off an autocast it was not told of), the head in fp32."""
    import numpy as np
    import torch

    try:
        import deepspeed  # noqa: F401
    except ImportError as err:
        if ctx.gpu:
            raise RuntimeError(f"DeepSpeed is not installed: pip install -e '.[deepspeed]' "
                               f"({err})") from err
        raise Skip("the deepspeed extra is not installed") from err
    learner = _learner(ctx, ctx.tiny(), backend="deepspeed", zero_stage=3)
    model = learner.backend.module.module
    seen: dict[str, torch.dtype] = {}

    def note(name: str):
        def hook(_module, _inputs, out) -> None:
            seen.setdefault(name, out.dtype)
        return hook

    linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    for name, module in linears.items():
        module.register_forward_hook(note(name))
    metrics = learner.step(_trajectories(8, 390, seed=0),
                           np.array([1.0, -1.0] * 4, dtype=np.float32))
    head = next(n for n, m in linears.items() if m is model.get_output_embeddings())
    products = sorted({str(seen[n]) for n in linears if n != head})
    if products != ["torch.bfloat16"] or seen[head] != torch.float32:
        raise RuntimeError(f"ZeRO-3 ran its products in {products}, the head in "
                           f"{seen[head]} (want bf16 and fp32)")
    return {"products": "bf16", "head": "fp32", "loss": round(metrics["learner/loss"], 4)}


def collective_sync(ctx: Context) -> dict:
    """Two training steps with the weights broadcast to 1, then 2, rollout workers: NCCL
    with a GPU per member (NCCL refuses two ranks on one device), gloo with --cpu."""
    figures, skipped = {}, []
    for workers in (1, 2):
        if ctx.gpu and ctx.gpus < 1 + workers:
            skipped.append(f"{workers} worker(s) need {1 + workers} GPUs")
            continue
        transport = "nccl" if ctx.gpu else "gloo"
        extra = ["rollout.gpus_per_worker=1", "learner.resources.gpus=1"] if ctx.gpu else [
            f"ray.num_cpus={1 + workers}"]
        rows = ctx.train(2, f"weight_sync.transport={transport}",
                         f"rollout.num_workers={workers}", *extra)
        figures[f"sync_s_{workers}w"] = round(rows[-1]["timing/weight_sync"], 3)
    if not figures:
        raise Skip(f"{'; '.join(skipped)}; this machine has {ctx.gpus}")
    return figures


def sync_time(ctx: Context) -> dict:
    """Learner export plus the engine's reload of a 0.5B-parameter model (on the CPU, a
    small one), medians of 3: the object-store path a one-GPU run takes every step."""
    name = "half-b" if ctx.gpu else "small"
    path = (ctx.built_model(name, 1024, 30, 16) if ctx.gpu
            else ctx.built_model(name, 256, 4, 4))
    engine = ctx.engine(path)  # the engine first: it sizes its cache from free memory
    learner = _learner(ctx, path)
    exports, loads = [], []
    for v in range(1, 4):
        start = time.perf_counter()
        weights = learner.export_weights()
        exports.append(time.perf_counter() - start)
        start = time.perf_counter()
        engine.update_weights(weights, v)
        loads.append(time.perf_counter() - start)
    engine.close()
    total = statistics.median(e + lo for e, lo in zip(exports, loads, strict=True))
    figures = {"params_m": round(ctx.params(name) / 1e6), "export_s":
               round(statistics.median(exports), 3), "load_s": round(statistics.median(loads),
                                                                    3),
               "total_s": round(total, 3)}
    if ctx.gpu:
        figures["vs_peer_0.15s"] = round(total / PEER_SYNC_S, 2)
    return figures


def generation(ctx: Context) -> dict:
    """Generated tokens/s of arl's vLLM engine against bare vLLM on the same prompts and
    sampling (256 prompts of 100 ids, up to 128 new tokens, temperature 1)."""
    if not ctx.gpu:
        raise Skip("compares against vLLM on a GPU")
    import vllm
    from vllm.inputs import TokensPrompt

    from arl.types import SamplingParams

    path = ctx.built_model("half-b", 1024, 30, 16)
    prompts = _prompts(256, 100, seed=1)
    engine = ctx.engine(path, share=0.4)
    engine.generate(prompts[:8], SamplingParams(1.0, 1.0, 8, seed=9))  # warm-up
    start = time.perf_counter()
    out = engine.generate(prompts, SamplingParams(1.0, 1.0, 128, seed=0))
    arl_tok_s = sum(len(g.token_ids) for g in out) / (time.perf_counter() - start)
    engine.close()
    bare = vllm.LLM(model=path, dtype="bfloat16", gpu_memory_utilization=0.4, seed=0,
                    enforce_eager=True)
    params = vllm.SamplingParams(temperature=1.0, max_tokens=128, seed=0)
    bare.generate([TokensPrompt(prompt_token_ids=prompts[0])], params, use_tqdm=False)
    start = time.perf_counter()
    done = bare.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                         use_tqdm=False)
    bare_tok_s = sum(len(o.outputs[0].token_ids) for o in done) / (time.perf_counter() - start)
    return {"arl_tok_s": round(arl_tok_s), "vllm_tok_s": round(bare_tok_s),
            "ratio": round(arl_tok_s / bare_tok_s, 3)}


MORE_STEPS: list[Step] = [
    Step("deepspeed-bf16", "DeepSpeed ZeRO-3, bf16 products: the dtype each layer ran in",
         "the deepspeed extra (a CUDA GPU; --cpu: DeepSpeed's CPU accelerator)",
         deepspeed_dtype),
    Step("nccl-sync", "weight sync over NCCL to 1 and 2 rollout workers, 2 steps each",
         "2 GPUs for 1 worker, 3 for 2 (NCCL: a GPU per member); --cpu: gloo",
         collective_sync),
    Step("sync-time", "export + reload of a 0.5B-parameter model, medians of 3",
         "a GPU with about 12 GiB free", sync_time),
    Step("generation", "generated tokens/s: arl's vLLM engine against bare vLLM",
         "vLLM on a GPU", generation),
]
