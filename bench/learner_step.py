"""One learner step with and without a shared prompt run once, measured in one run.

Usage: python bench/learner_step.py [CONFIG] [key=value ...] [--repeats 3]
       (default configs/tictactoe_move.yaml; its model must exist)

A batch shaped like one of CONFIG's steps: `groups_per_step` start states of its env, each
prompt rendered with the model's chat template exactly as rollouts render it, and
`group_size` completions per group of a real tool call's length (a well-formed call on a
random square, so the rows differ). `learner.compute.share_prefix` true and false alternate, each
step timed after one warm-up step per variant; the learner is the real `GSPOLearner` with
CONFIG's learner section (dtype, mini-batches, micro-batches, threads). Prints the median
seconds of each and their ratio, the tokens the forward passes ran, and the loss of the
first step of each (they agree to rounding). The last line is JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import numpy as np
import torch

from arl.config import load_config
from arl.envs.registry import make_env
from arl.episode import ChatRenderer
from arl.learner.gspo_learner import GSPOLearner
from arl.model.causal_lm import load_model
from arl.model.source import local_folder
from arl.model_source import local_path
from arl.steps import start_states
from arl.tools import format_tool_call
from arl.types import ToolCall, Trajectory


def batch(cfg, path: str) -> list[Trajectory]:
    """One step's trajectories: real prompts, a well-formed call on a random square each."""
    _, tok = load_model(path, "float32")
    renderer = ChatRenderer(tok, stop_token=tok.eos_token)
    rng = np.random.default_rng(cfg.seed)
    states = start_states(cfg, 0)
    out = []
    for g, seed in enumerate(states.env_seeds):
        for i in range(cfg.rollout.group_size):
            reset = make_env(cfg.env, variant=i).reset(seed)  # as the rollout worker does
            prompt = renderer.prompt_ids(reset)
            call = format_tool_call(ToolCall(reset.tools[0].name,
                                             {"square": int(rng.integers(1, 10))}))
            reply = renderer.encode(call) + [int(tok.convert_tokens_to_ids(tok.eos_token))]
            ids = np.array(prompt + reply, dtype=np.int32)
            mask = np.r_[np.zeros(len(prompt)), np.ones(len(reply))].astype(np.int8)
            out.append(Trajectory(
                token_ids=ids, loss_mask=mask,
                sampler_logprobs=np.where(mask == 1, -0.5, 0.0).astype(np.float32),
                reward=0.0, group_id=g, policy_version=0, num_turns=1, num_tool_calls=1,
                num_invalid_calls=0, episode_id=g * cfg.rollout.group_size + i))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="configs/tictactoe_move.yaml")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cfg = load_config([args.config], args.overrides)
    path = local_folder(local_path(cfg.model.path))
    trajectories = batch(cfg, path)
    advantages = np.random.default_rng(1).normal(size=len(trajectories)).astype(np.float32)
    learners, tokens, times, losses = {}, {}, {}, {}
    for share in (True, False):
        lc = dataclasses.replace(cfg.learner, share_prefix=share)
        learners[share] = GSPOLearner(path, lc, cfg.model.dtype, cfg.steps, cfg.seed)
        tokens[share] = 0

        def count(module, args, kwargs, share=share):
            tokens[share] += int(kwargs["input_ids"].numel())

        learners[share].model.register_forward_pre_hook(count, with_kwargs=True)
        losses[share] = learners[share].step(trajectories, advantages)["learner/loss"]
        tokens[share], times[share] = 0, []
    for _ in range(args.repeats):
        for share in (True, False):
            start = time.perf_counter()
            learners[share].step(trajectories, advantages)
            times[share].append(time.perf_counter() - start)
    shared, plain = (statistics.median(times[s]) for s in (True, False))
    print(f"{len(trajectories)} rows of {min(map(len, (t.token_ids for t in trajectories)))}-"
          f"{max(map(len, (t.token_ids for t in trajectories)))} tokens, dtype "
          f"{learners[True].compute_dtype}: step {shared:.3f} s with a shared prompt run once, "
          f"{plain:.3f} s without ({plain / shared:.2f}x); tokens through forward passes "
          f"{tokens[True] // args.repeats} against {tokens[False] // args.repeats}; first "
          f"step's loss {losses[True]:.6f} against {losses[False]:.6f}")
    print(json.dumps({"config": args.config, "rows": len(trajectories),
                      "dtype": learners[True].compute_dtype, "shared_s": round(shared, 4),
                      "plain_s": round(plain, 4), "speedup": round(plain / shared, 3),
                      "shared_tokens": tokens[True] // args.repeats,
                      "plain_tokens": tokens[False] // args.repeats,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
