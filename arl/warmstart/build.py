"""`arl warmstart`: teach a model the chat and tool-call format on synthetic transcripts.

The model is the tiny offline one, built here from scratch (tokenizer and weights), or with
`warmstart.base` a pretrained model (SmolLM2 from a GGUF file, any HF folder) with its own
tokenizer and chat template. A composition root (like train.py): it wires envs (synthetic
transcripts), learner (tokenizer, model, supervised pass) and actors (evaluation with the
rollout engine). The result is a normal HF model directory, cached: a second call with the
same settings does nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

from arl.config import Config, check_warmstart_base, to_dict
from arl.dtypes import resolve as resolve_dtype
from arl.env_spec import resolve_env
from arl.envs.config import MoveTaskConfig
from arl.envs.registry import env_config
from arl.errors import UserError
from arl.files import require_ours
from arl.model_source import local_path

STAMP_FILE = "warmstart.json"


def _stamp(cfg: Config) -> str:
    """What the cached model depends on: the warm-start settings, the env, the seed, and the
    tiny model's chat template."""
    from arl.model.tiny import CHAT_TEMPLATE
    from arl.warmstart.demos import DATA_VERSION

    # The resolved compute dtype, not `auto`: a model trained in bf16 differs from one
    # trained in fp32, and the same config resolves differently on different CPUs.
    # Not where it is saved: a cached model that moves is the same model.
    settings = {**to_dict(cfg)["warmstart"],
                "compute_dtype": resolve_dtype(cfg.warmstart.compute_dtype)}
    settings.pop("output")
    settings.pop("eval_episodes")  # how the result is scored, not what it is
    if not settings["base"]:
        settings.pop("base")  # the tiny model's stamps stay what they were before the key
    key = {"warmstart": settings, "env": to_dict(cfg)["env"], "seed": cfg.seed,
           "chat_template": CHAT_TEMPLATE, "data_version": DATA_VERSION}
    if cfg.warmstart.base:  # which weights: a GGUF conversion's folder names its sha256
        key["base_model"] = _base_identity(cfg.warmstart.base)
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def output_dir(cfg: Config) -> str:
    """The folder `warmstart.output` names (`cache:<name>`: $ARL_HOME/models/<name>)."""
    return local_path(cfg.warmstart.output)


def cached(cfg: Config) -> bool:
    path = os.path.join(output_dir(cfg), STAMP_FILE)
    if not os.path.isfile(path):
        return False
    with open(path, encoding="utf-8") as f:
        return json.load(f)["stamp"] == _stamp(cfg)


def warmstart(cfg: Config, force: bool = False) -> dict[str, object]:
    """Build (or, with `warmstart.base`, load), fine-tune, save and evaluate the model; return
    the record it saves. Raises ConfigError when `warmstart.base` names no model here."""
    check_warmstart_base(cfg)
    ws, out = cfg.warmstart, output_dir(cfg)
    require_ours(out, "warmstart", "warmstart.output")  # before minutes of work, not after
    if cached(cfg) and not force:
        print(f"warm-start model cached at {out}")
        with open(os.path.join(out, STAMP_FILE), encoding="utf-8") as f:
            return json.load(f)

    from arl.model.causal_lm import set_torch_threads
    from arl.model.tiny import build_tiny_model, build_tokenizer, render_chat, save_model_dir
    from arl.rollout.evaluation import evaluate
    from arl.warmstart.demos import corpus_texts
    from arl.warmstart.sft import supervised_finetune

    set_torch_threads(os.cpu_count() or 1)
    compute = resolve_dtype(ws.compute_dtype)
    start = time.perf_counter()
    env_cfg = cfg.env if ws.env in ("", cfg.env.name) else env_config(ws.env)
    moves, games = _demos(cfg, env_cfg)
    demos = moves + games
    if ws.base:
        model, tokenizer = _pretrained(ws.base)
    else:
        # The tokenizer learns from the env texts and from whole rendered prompts, so the
        # fixed parts of every prompt (template, tool signature) compress into few tokens.
        rendered = [render_chat(d.reset.messages, d.reset.tools, True) + d.target
                    for d in moves[:400] + games[:100]]
        tokenizer = build_tokenizer(corpus_texts(seed=cfg.seed) + rendered, ws.vocab_size)
        model = build_tiny_model(tokenizer, ws.hidden_size, ws.num_layers, ws.num_heads,
                                 cfg.seed, ws.architecture)
    examples = [(d.reset.messages, d.reset.tools, d.target) for d in demos]
    losses = supervised_finetune(model, tokenizer, examples, ws.epochs, ws.lr, ws.batch_size,
                                 cfg.seed, ws.prompt_loss, bf16_autocast=compute == "bfloat16")
    save_model_dir(model, tokenizer, out)
    trained = time.perf_counter() - start
    report = evaluate(out, env_cfg, ws.eval_episodes, seed=cfg.seed + 10**6)
    record = {
        "stamp": _stamp(cfg),
        "sft_losses": [round(x, 4) for x in losses],
        "train_seconds": round(trained, 1),
        "eval": report.as_dict(),
    }
    with open(os.path.join(out, STAMP_FILE), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
    print(f"warm-start model saved to {out} in {trained:.0f}s; "
          f"on {report.episodes} episodes: parse rate {report.parse_rate:.1%}, "
          f"mean reward {report.reward_mean:+.3f}")
    print(json.dumps(record["eval"]))
    return record


def _pretrained(base: str):
    """(model in fp32, its tokenizer) of `warmstart.base` (a GGUF file is converted once)."""
    from arl.model.causal_lm import load_model
    from arl.model.source import local_folder

    return load_model(local_folder(base), "float32")


def _base_identity(base: str) -> dict[str, str]:
    """What names the base model's weights: the path as given, and a hash of the folder's
    config.json and weight files' names and sizes (a GGUF file's conversion folder also
    carries the file's sha256 in its name)."""
    from arl.model.source import local_folder

    folder = local_folder(base)
    digest = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        if name == "config.json" or name.endswith(".safetensors"):
            path = os.path.join(folder, name)
            digest.update(f"{name}:{os.path.getsize(path)}".encode())
            if name == "config.json":
                with open(path, "rb") as f:
                    digest.update(f.read())
    return {"path": base, "folder": os.path.basename(folder), "files": digest.hexdigest()[:16]}


def _demos(cfg: Config, env_cfg) -> tuple[list, list]:
    """(the one-env transcripts, the full-game ones): tic-tac-toe's own for the one-move
    task (with `warmstart.game_fraction` from full games), else any env whose spec names its
    legal calls (arl/warmstart/env_demos.py)."""
    from arl.warmstart.demos import game_examples, warmstart_examples
    from arl.warmstart.env_demos import env_examples

    ws = cfg.warmstart
    if not isinstance(env_cfg, MoveTaskConfig):
        spec = resolve_env(env_cfg.name)
        if spec.legal_calls is None:
            raise UserError(f"warmstart: env {env_cfg.name!r} does not name its legal calls "
                            "(EnvSpec.legal_calls), so no transcripts can be made for it")
        return env_examples(spec, env_cfg, ws.examples, cfg.seed, ws.malformed_fraction), []
    game_cfg = env_config("tictactoe", opponent="random", board_format=env_cfg.board_format)
    n_game = round(ws.examples * ws.game_fraction)
    moves = warmstart_examples(env_cfg, ws.examples - n_game, cfg.seed, ws.malformed_fraction,
                               ws.illegal_fraction)
    return moves, game_examples(game_cfg, n_game, cfg.seed + 1, ws.malformed_fraction)
