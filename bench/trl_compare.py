"""arl's training step against TRL's GRPOTrainer with GSPO settings, on the same work, back to
back on this machine.

Usage: python bench/trl_compare.py [--steps 14] [--warmup 4] [--trl-dtype float32|bfloat16]
       (needs `arl warmstart` first and the trl extra: pip install -e '.[trl]')

The same work on both sides, per step (TRL: per generation batch):
  - the tiny warm start (`cache:tiny-warmstart`), both cores;
  - 8 boards of the demo's distribution (`arl.steps.start_states`), 8 samples each, rendered
    by arl's ChatRenderer (TRL gets that text as its prompt), temperature 1, top-p 1, at most
    32 new tokens, scored by the demo's reward table through the env itself;
  - 4 mini-batches of 16 completions, one AdamW step each (TRL: steps_per_generation=4,
    per_device_train_batch_size=16), the GSPO sequence ratio clipped at 0.01 (TRL:
    importance_sampling_level="sequence", loss_type="grpo", epsilon=epsilon_high=0.01), no KL
    term, no entropy bonus, lr 1.5e-4 constant.
arl runs the demo config with dynamic sampling, group symmetries, the entropy bonus, the
warm-up, the batch baseline and the odds cap off (they change the work or the loss: GSPO with
one baseline per group, as TRL computes it) through its embedded Ray cluster: its step is
`timing/step`. It runs twice: with the old log-probs of mini-batches 2-4 from a no-grad pass
of the learner's own, as the demo and TRL compute them, and with the sampler's instead
(`learner.loss.old_logprobs: sampler`, no pass: `trl_step_ratio_sampler`).
TRL's step is the wall time from one generation batch's first optimizer step to the next
one's. Medians after the first WARMUP steps. Prints `trl_step_ratio` = arl's step / TRL's
(lower: arl faster).
The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

from arl.app.train import train
from arl.config import Config, load_config
from arl.dtypes import resolve as resolve_dtype
from arl.envs.registry import make_env
from arl.episode import ChatRenderer, parse_turn
from arl.model_source import local_path
from arl.steps import start_states

CONFIG = "configs/tictactoe_move.yaml"
SAME_WORK = ["rollout.dynamic_sampling=false", "env.group_symmetries=false",
             "learner.loss.entropy_coef=0", "learner.optim.schedule=constant",
             "learner.optim.warmup_steps=0", "learner.loss.name=gspo",
             "learner.advantage.level=episode", "learner.loss.negative_odds_cap=0",
             "learner.checkpoint.every=0", "wandb.mode=disabled", "ray.address=local"]


def arl_steps(steps: int, warmup: int, *overrides: str) -> tuple[Config, list[float]]:
    """(the resolved config, arl's `timing/step` of every step after the warm-up)."""
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config([CONFIG], [*SAME_WORK, *overrides, f"steps={steps}",
                                     f"output_dir={out}"])
        train(cfg)
        with open(f"{out}/{cfg.run_name}/metrics.jsonl", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
    return cfg, [r["timing/step"] for r in rows[warmup:]]


def prompts(cfg: Config, steps: int, tokenizer) -> list[dict]:
    """One row per group of every step, in step order: the prompt's text and its env seed."""
    renderer = ChatRenderer(tokenizer, stop_token=tokenizer.eos_token)
    rows = []
    for step in range(steps):
        for seed in start_states(cfg, step).env_seeds:
            ids = renderer.prompt_ids(make_env(cfg.env).reset(seed))
            text = tokenizer.decode(ids)
            if tokenizer(text, add_special_tokens=False)["input_ids"] != ids:
                raise SystemExit("the rendered prompt does not survive decode + encode")
            rows.append({"prompt": text, "env_seed": seed})
    return rows


def reward_fn(cfg: Config, stop_id: int):
    """TRL reward function: each completion scored by a fresh env on its group's board."""
    def reward(prompts, completions, completion_ids, env_seed, **_):
        scores = []
        for text, ids, seed in zip(completions, completion_ids, env_seed, strict=True):
            env = make_env(cfg.env)
            start = env.reset(seed)
            finished = stop_id in ids or len(ids) < cfg.rollout.max_new_tokens
            scores.append(env.step(parse_turn(text, finished, start.tools)).reward)
        return scores
    return reward


def trl_steps(cfg: Config, steps: int, warmup: int, dtype: str) -> list[float]:
    """TRL's seconds per generation batch, after the warm-up."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(cfg.learner.resources.cpus)
    path = local_path(cfg.model.path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    stop_id = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    model.generation_config.eos_token_id = stop_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    per_gen = cfg.learner.optim.mini_batches
    batch = cfg.rollout.groups_per_step * cfg.rollout.group_size
    marks: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, *_, **__):  # TrainerCallback's hook
            if state.global_step % per_gen == 0:
                marks.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out, use_cpu=True, bf16=dtype == "bfloat16", report_to=[],
            save_strategy="no", logging_steps=10**6, disable_tqdm=True, seed=cfg.seed,
            gradient_checkpointing=False,  # on by default in TRL; arl keeps activations
            learning_rate=cfg.learner.optim.lr, lr_scheduler_type="constant", warmup_steps=0,
            weight_decay=0.0, max_grad_norm=cfg.learner.optim.grad_clip,
            num_generations=cfg.rollout.group_size,
            per_device_train_batch_size=batch // per_gen, steps_per_generation=per_gen,
            gradient_accumulation_steps=1, num_iterations=1, max_steps=(steps + 1) * per_gen,
            max_completion_length=cfg.rollout.max_new_tokens,
            temperature=cfg.rollout.temperature, top_p=1.0, top_k=0,
            importance_sampling_level="sequence", loss_type="grpo", beta=0.0,
            epsilon=cfg.learner.loss.clip_low, epsilon_high=cfg.learner.loss.clip_high,
            shuffle_dataset=False, log_completions=False, dataloader_num_workers=0)
        trainer = GRPOTrainer(model=model, reward_funcs=reward_fn(cfg, stop_id), args=args,
                              train_dataset=Dataset.from_list(prompts(cfg, steps + 1, tokenizer)),
                              processing_class=tokenizer, callbacks=[Clock()])
        trainer.train()
    gaps = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    return gaps[warmup:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--trl-dtype", default="float32", choices=("float32", "bfloat16"))
    args = parser.parse_args()
    cfg, arl = arl_steps(args.steps, args.warmup)
    _, arl_sampler = arl_steps(args.steps, args.warmup, "learner.loss.old_logprobs=sampler")
    trl = trl_steps(cfg, args.steps, args.warmup, args.trl_dtype)
    result = {"arl_step_s": round(statistics.median(arl), 3),
              "arl_sampler_step_s": round(statistics.median(arl_sampler), 3),
              "trl_step_s": round(statistics.median(trl), 3),
              "arl_steps": len(arl), "trl_steps": len(trl), "trl_dtype": args.trl_dtype,
              "arl_engine_dtype": resolve_dtype(cfg.model.dtype),
              "arl_learner_dtype": cfg.learner.compute.dtype}
    result["trl_step_ratio"] = round(result["arl_step_s"] / result["trl_step_s"], 3)
    result["trl_step_ratio_sampler"] = round(
        result["arl_sampler_step_s"] / result["trl_step_s"], 3)
    print(f"arl {result['arl_step_s']:.3f} s/step ({result['arl_sampler_step_s']:.3f} with the "
          f"sampler's log-probs as the old ones), TRL GRPOTrainer (GSPO) "
          f"{result['trl_step_s']:.3f} s per generation batch: ratio {result['trl_step_ratio']} "
          f"({result['trl_step_ratio_sampler']})")
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
