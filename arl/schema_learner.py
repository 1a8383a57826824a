"""The learner's part of the config schema (arl/schema.py): `learner.*` in sections, and the
flat keys it had before them, each with its new place."""

from __future__ import annotations

from dataclasses import dataclass

from arl.credit import ADVANTAGE_SCALES
from arl.credit import SCOPES as STEP_GROUP_SCOPES
from arl.dtypes import DTYPES
from arl.schema_fields import opt, section

LOSS_NAMES = ("gspo", "gspo_token", "grpo")
BACKEND_NAMES = ("torch", "deepspeed")


@dataclass
class LoraConfig:
    rank: int = opt(0, "0: full fine-tuning; > 0: train LoRA adapters of this rank (peft)",
                    check="non_negative")
    alpha: float = opt(16.0, "adapter scale = alpha / rank")
    target_modules: list[str] = opt(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                     "up_proj", "down_proj"], "modules that get adapters")


@dataclass
class LossConfig:
    """The policy loss: GSPO's sequence ratio and clip, and the terms added to it."""

    name: str = opt("gspo", "the policy loss (grpo: token-level, for comparisons)",
                    choices=LOSS_NAMES)
    clip_low: float = opt(3e-4, "GSPO's lower clip epsilon (paper: 3e-4)", check="positive")
    clip_high: float = opt(4e-4, "GSPO's upper clip epsilon (paper: 4e-4)", check="positive")
    behaviour_is_cap: float = opt(0.0, "> 0: weight advantages by min(behaviour IS ratio, cap)",
                                  check="non_negative")
    old_logprobs: str = opt("learner", "the clip's anchor for mini-batches after the first: "
                            "learner (a no-grad pass at the step's start) or sampler (the "
                            "engine's own log-probs: no pass, but the engine's numerics enter "
                            "every ratio; sync mode)", choices=("learner", "sampler"))
    negative_odds_cap: float = opt(0.0, ">= 1: a negative advantage is multiplied by its "
                                   "reply's odds p/(1-p) at the step's start, clamped to [1, "
                                   "cap] (unlikelihood for replies that scored below their "
                                   "baseline): a reply the policy has settled on is pushed "
                                   "down as hard as an unsure one; 0: off",
                                   check="non_negative")
    entropy_coef: float = opt(0.0, "> 0: subtract coef x the sampled tokens' mean entropy from "
                              "the loss (an exploration bonus)", check="non_negative")
    entropy_tokens: int = opt(0, "entropy_coef > 0: the bonus is the mean over each "
                              "sequence's k highest-entropy sampled tokens (its decisions, e.g."
                              " a tool call's argument), not over the format's near-certain "
                              "ones too; 0: all",
                              check="non_negative")
    kl_coef: float = opt(0.0, "beta > 0: add beta x KL(policy || reference) to the loss, the "
                         "reference being the model the run starts from (model.path; with "
                         "LoRA, the model with its adapters off), estimated on the sampled "
                         "tokens and averaged per sequence like the ratio (TRL's beta, verl's "
                         "kl_loss_coef); costs a no-grad pass a step and, without LoRA, a "
                         "frozen copy of the model", check="non_negative")
    kl_estimator: str = opt("k3", "the per-token KL estimate: k3 (exp(d) - d - 1, d = log "
                            "ref - log policy; verl's low_var_kl, clamped at 10), k2 (d^2 / 2) "
                            "or k1 (-d)", choices=("k1", "k2", "k3"))


@dataclass
class AdvantageConfig:
    """How rewards become advantages."""

    level: str = opt("episode", "episode: one advantage per episode (GSPO); turn: one per "
                     "model turn from per-turn rewards and step-level groups (arl/credit.py;"
                     " needs learner.loss.name gspo_token or grpo)",
                     choices=("episode", "turn"))
    scale: str = opt("std", "std: divide by the group's std (GRPO, GSPO); none: only subtract "
                     "the group mean (Dr. GRPO), so a group with more at stake weighs more: "
                     "where a group shares the env's random numbers (a deal, a bot's seed), "
                     "std scaling can cancel the better action's gradient",
                     choices=ADVANTAGE_SCALES)
    eps: float = opt(1e-6, "added to the group std", check="positive")
    step_weight: float = opt(1.0, "level=turn: weight of the step-level term",
                             check="non_negative")
    turn_discount: float = opt(1.0, "level=turn: gamma of the returns-to-go; 0 compares only "
                               "the turns' own rewards", check="fraction")
    step_group_scope: str = opt("group", "level=turn: turns in the same state share a baseline "
                                "within their group (GiGPO) or across the batch; all: every "
                                "turn of the batch shares one, whatever its state",
                                choices=STEP_GROUP_SCOPES)


@dataclass
class OptimConfig:
    """The optimizer and its schedule."""

    lr: float = opt(1e-4, "AdamW learning rate", check="positive")
    schedule: str = opt("constant", "cosine decays to 0 at the last step",
                        choices=("constant", "cosine"))
    warmup_steps: int = opt(0, "linear warmup, in learner steps", check="non_negative")
    weight_decay: float = opt(0.0, "AdamW weight decay", check="non_negative")
    grad_clip: float = opt(1.0, "gradient-norm clip", check="positive")
    mini_batches: int = opt(4, "optimizer steps per rollout batch (GSPO paper: 4)",
                            check="positive")
    max_nonfinite_in_row: int = opt(8, "skipped (NaN/inf) optimizer steps in a row before the "
                                    "run stops", check="positive")


@dataclass
class ComputeConfig:
    """How a learner step computes: precision, micro-batches, shared prompts."""

    dtype: str = opt("float32", "matrix products in bfloat16 (fp32 weights, AdamW state, output "
                     "head and log-ratios) or float32; auto: bfloat16 where the GPU or CPU "
                     "computes it natively", choices=DTYPES)
    micro_batch_size: int = opt(16, "sequences per forward/backward", check="positive")
    share_prefix: bool = opt(True, "run a prompt that rows of a micro-batch share (the G "
                             "samples of a start state) once, and order each mini-batch's rows "
                             "by group so that they do; exact up to rounding")


@dataclass
class LearnerResources:
    """Where and how many learners run, and who applies their updates."""

    num_workers: int = opt(1, "data-parallel learner actors (M)", check="positive")
    cpus: int = opt(1, "Ray CPUs (and torch threads) per learner", check="positive")
    gpus: float = opt(0.0, "Ray GPUs per learner; > 0 trains on the GPU; a fraction shares one",
                      check="non_negative")
    custom: dict[str, float] = opt({}, "custom Ray resources per learner (see rollout.resources)")
    backend: str = opt("torch", "who applies updates: torch, or deepspeed (the extra)",
                       choices=BACKEND_NAMES)
    zero_stage: int = opt(2, "backend=deepspeed: ZeRO stage 1 (AdamW state), 2 (+ gradients) "
                          "or 3 (+ weights)")
    collective_timeout_s: float = opt(600.0, "num_workers > 1: seconds a rank waits in a "
                                      "collective before it fails (a dead peer)",
                                      check="positive")


@dataclass
class CheckpointConfig:
    """Checkpoints, and what the run does with them when a learner dies."""

    every: int = opt(100, "steps between checkpoints; 0: only at the end", check="non_negative")
    keep: int = opt(0, "keep only the newest k checkpoints; 0: keep all", check="non_negative")
    max_restarts: int = opt(3, "times the run rebuilds a dead learner group from its last "
                            "checkpoint and replays the steps since; 0: a death ends the run",
                            check="non_negative")


@dataclass
class LearnerConfig:
    """The GSPO learner, in sections (an old flat key, e.g. `learner.lr`, names its new place:
    `MOVED_KEYS`)."""

    loss: LossConfig = section(LossConfig, "the policy loss")
    advantage: AdvantageConfig = section(AdvantageConfig, "rewards into advantages")
    optim: OptimConfig = section(OptimConfig, "the optimizer and its schedule")
    compute: ComputeConfig = section(ComputeConfig, "precision and micro-batches")
    resources: LearnerResources = section(LearnerResources, "learner actors and backend")
    checkpoint: CheckpointConfig = section(CheckpointConfig, "checkpoints and learner restarts")
    lora: LoraConfig = section(LoraConfig, "LoRA adapters (the lora extra)")


LEARNER_SECTIONS = ("loss", "advantage", "optim", "compute", "resources", "checkpoint", "lora")
# The flat learner keys before the learner config had sections -> where each lives now.
MOVED_KEYS = {
    "learner.loss": "learner.loss.name",
    "learner.clip_low": "learner.loss.clip_low",
    "learner.clip_high": "learner.loss.clip_high",
    "learner.behaviour_is_cap": "learner.loss.behaviour_is_cap",
    "learner.old_logprobs": "learner.loss.old_logprobs",
    "learner.negative_odds_cap": "learner.loss.negative_odds_cap",
    "learner.entropy_coef": "learner.loss.entropy_coef",
    "learner.entropy_tokens": "learner.loss.entropy_tokens",
    "learner.advantage": "learner.advantage.level",
    "learner.advantage_eps": "learner.advantage.eps",
    "learner.step_advantage_weight": "learner.advantage.step_weight",
    "learner.turn_discount": "learner.advantage.turn_discount",
    "learner.step_group_scope": "learner.advantage.step_group_scope",
    "learner.lr": "learner.optim.lr",
    "learner.lr_schedule": "learner.optim.schedule",
    "learner.warmup_steps": "learner.optim.warmup_steps",
    "learner.weight_decay": "learner.optim.weight_decay",
    "learner.grad_clip": "learner.optim.grad_clip",
    "learner.mini_batches": "learner.optim.mini_batches",
    "learner.max_nonfinite_in_row": "learner.optim.max_nonfinite_in_row",
    "learner.dtype": "learner.compute.dtype",
    "learner.micro_batch_size": "learner.compute.micro_batch_size",
    "learner.share_prefix": "learner.compute.share_prefix",
    "learner.num_workers": "learner.resources.num_workers",
    "learner.cpus": "learner.resources.cpus",
    "learner.gpus": "learner.resources.gpus",
    "learner.backend": "learner.resources.backend",
    "learner.zero_stage": "learner.resources.zero_stage",
    "learner.collective_timeout_s": "learner.resources.collective_timeout_s",
    "learner.checkpoint_every": "learner.checkpoint.every",
    "learner.keep_checkpoints": "learner.checkpoint.keep",
    "learner.max_restarts": "learner.checkpoint.max_restarts",
}
