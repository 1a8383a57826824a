"""Shared builders for tests, one copy each: configs of the tiny CI run, its metrics rows,
random trajectories, a tiny learner, and a scripted policy that plays through the real
episode loop."""

from __future__ import annotations

import json
import pathlib
import re

import numpy as np

from arl.config import Config, LearnerConfig, load_config
from arl.types import Generation, ToolSchema, Trajectory

CI = "configs/ci.yaml"
UNTIMED = ("timing/", "perf/")  # wall-clock metrics differ between any two runs
# A tool written out by hand (the renderer tests pin its exact text).
TOOL = ToolSchema(
    name="choose_square",
    description="Mark an empty square (1-9) with your symbol.",
    parameters={
        "type": "object",
        "properties": {"square": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["square"],
    },
)


def ci_config(model_dir: str, out_dir=None, *overrides: str) -> Config:
    """configs/ci.yaml on `model_dir`, writing under `out_dir` (if given), on an embedded
    cluster of its own."""
    paths = [f"output_dir={out_dir}"] if out_dir is not None else []
    return load_config([CI], [f"model.path={model_dir}", "ray.address=local", *paths,
                              *overrides])


def train_command(model_dir: str, out_dir, steps: int, *extra: str) -> list[str]:
    """`arl train configs/ci.yaml` (this interpreter's arl) on `model_dir` for `steps`
    steps into `out_dir`, on an embedded cluster of its own, then `extra` overrides."""
    import sys

    arl = pathlib.Path(sys.executable).parent / "arl"
    return [str(arl), "train", CI, f"model.path={model_dir}", f"output_dir={out_dir}",
            f"steps={steps}", "ray.address=local", *extra]


def subprocess_env() -> dict[str, str]:
    """This environment without RAY_ADDRESS (a child run starts its own cluster)."""
    import os

    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


def metrics_rows(run_dir, untimed: bool = True) -> list[dict]:
    """The rows of RUN_DIR/metrics.jsonl; with `untimed`, without timing and perf keys."""
    lines = (pathlib.Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    if untimed:
        rows = [{k: v for k, v in r.items() if not k.startswith(UNTIMED)} for r in rows]
    return rows


def random_trajectories(count: int, seed: int, vocab: int = 260, min_len: int = 10,
                        max_len: int = 24) -> list[Trajectory]:
    """`count` trajectories of random ids: a prompt (mask 0), then sampled tokens (mask 1)
    with a two-token env gap (mask 0); groups of 4, episode ids from 1000 * seed."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = int(rng.integers(min_len, max_len + 1))
        mask = np.zeros(n, dtype=np.int8)
        mask[n // 3:] = 1
        mask[n // 3 + 2: n // 3 + 4] = 0  # tokens the env appended
        logprobs = np.where(mask == 1, -rng.uniform(0.1, 6.0, n), 0.0).astype(np.float32)
        out.append(Trajectory(
            token_ids=rng.integers(7, vocab, n).astype(np.int32), loss_mask=mask,
            sampler_logprobs=logprobs, reward=0.0, group_id=i // 4, policy_version=0,
            num_turns=1, num_tool_calls=1, num_invalid_calls=0, episode_id=1000 * seed + i))
    return out


def grouped_trajectories(groups: int, size: int, seed: int, vocab: int = 260,
                         prompt_len: int = 30) -> list[Trajectory]:
    """`groups` x `size` trajectories whose groups share a random prompt of `prompt_len`
    ids (mask 0), each followed by its own 3-8 random sampled ids (mask 1)."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(groups):
        prompt = rng.integers(7, vocab, prompt_len)
        for i in range(size):
            reply = rng.integers(7, vocab, int(rng.integers(3, 9)))
            mask = np.r_[np.zeros(prompt_len), np.ones(len(reply))].astype(np.int8)
            out.append(Trajectory(
                token_ids=np.r_[prompt, reply].astype(np.int32), loss_mask=mask,
                sampler_logprobs=np.where(mask == 1, -1.0, 0.0).astype(np.float32),
                reward=0.0, group_id=g, policy_version=0, num_turns=1, num_tool_calls=1,
                num_invalid_calls=0, episode_id=1000 * seed + g * size + i))
    return out


def random_advantages(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed + 1000).normal(size=count).astype(np.float32)


def learner_cfg(**flat) -> LearnerConfig:
    """A LearnerConfig from the keys' short names (lr, mini_batches, backend, ...: their
    names before the learner config had sections, or a section's field name for keys newer
    than the sections, e.g. kl_coef) and whole sections (lora=LoraConfig())."""
    import dataclasses

    from arl.schema_learner import LEARNER_SECTIONS, MOVED_KEYS

    newer = {f.name: section for section in LEARNER_SECTIONS
             for f in dataclasses.fields(getattr(LearnerConfig(), section))}
    sections: dict[str, dict] = {}
    whole = {}
    for name, value in flat.items():
        moved = MOVED_KEYS.get(f"learner.{name}")
        if moved is None and name in newer and name not in LEARNER_SECTIONS:
            moved = f"learner.{newer[name]}.{name}"
        if moved is None:
            whole[name] = value
            continue
        _, section, key = moved.split(".")
        sections.setdefault(section, {})[key] = value
    base = LearnerConfig(**whole)
    return dataclasses.replace(base, **{
        section: dataclasses.replace(getattr(base, section), **values)
        for section, values in sections.items()})


def tiny_learner(model_dir: str, total_steps: int = 10, seed: int = 0, **overrides):
    """A GSPOLearner on `model_dir` (lr 1e-3, 2 mini-batches of micro-batches of 4, unless
    `overrides` say otherwise)."""
    from arl.learner.gspo_learner import GSPOLearner

    cfg = learner_cfg(**{"lr": 1e-3, "mini_batches": 2, "micro_batch_size": 4, **overrides})
    return GSPOLearner(model_dir, cfg, "float32", total_steps=total_steps, seed=seed)


def learner_checkpoint(model_dir: str, path, lora: int = 0):
    """A real learner's checkpoint at PATH after one update (its weights differ from the
    model's), with the parts of a run's config that export and eval read."""
    from arl.config import LoraConfig, ModelConfig
    from arl.learner.worker import LearnerWorker

    cfg = learner_cfg(mini_batches=1, micro_batch_size=8, lr=1e-4,
                        lora=LoraConfig(rank=lora, alpha=8.0))
    worker = LearnerWorker(ModelConfig(path=model_dir, dtype="float32"), cfg, 2, 0, 1.0, 1)
    worker.step(random_advantages(8, seed=1), np.ones(8, dtype=bool),
                random_trajectories(8, seed=1))
    lora_cfg = {"rank": lora, "alpha": 8.0, "target_modules": list(cfg.lora.target_modules)}
    worker.save_checkpoint(str(path), 1, {"config": {"model": {"path": model_dir},
                                                     "learner": {"lora": lora_cfg}}})
    return path


ROW = re.compile(r"^([1-9XO])\|([1-9XO])\|([1-9XO])$", re.M)
LISTS = re.compile(r"^X: ([-\d ]+)\nO: ([-\d ]+)\nfree:", re.M)


def read_board(text: str) -> tuple[str, ...]:
    """The last tic-tac-toe board in `text`, in either board format."""
    lists = LISTS.findall(text)
    if lists:
        board = ["."] * 9
        for mark, squares in zip("XO", lists[-1], strict=True):
            for square in squares.split():
                if square != "-":
                    board[int(square) - 1] = mark
        return tuple(board)
    cells = [c for row in ROW.findall(text)[-3:] for c in row]
    return tuple(c if c in "XO" else "." for c in cells)


class ScriptedEngine:
    """A policy written by hand: reads the last board of the prompt and replies with the
    square `choose(board, agent)` picks, or a malformed call when it picks None."""

    version = 0

    def __init__(self, tokenizer, choose):
        self.tokenizer, self.choose = tokenizer, choose

    def get_tokenizer(self):
        return self.tokenizer

    def update_weights(self, weights, version):
        raise NotImplementedError

    def generate(self, prompts, params):
        out = []
        for ids in prompts:
            text = self.tokenizer.decode(ids)
            board = read_board(text)
            agent = re.findall(r"You are ([XO])", text)[-1]
            square = self.choose(board, agent)
            reply = ("<tool_call>{oops</tool_call>" if square is None else
                     f'<tool_call>{{"name": "choose_square", "arguments": {{"square": {square}}}}}'
                     "</tool_call>")
            reply_ids = self.tokenizer.encode(reply + self.tokenizer.eos_token,
                                              add_special_tokens=False)
            out.append(Generation(np.array(reply_ids, dtype=np.int32),
                                  np.zeros(len(reply_ids), dtype=np.float32), True))
        return out


def arl_cli(*args: str, env: dict | None = None, cwd=None, timeout: float = 120):
    """`arl ARGS` as a user runs it: this interpreter's `python -m arl.app.cli` in a subprocess
    (in the repository unless `cwd`), with `env` added to this environment."""
    import os
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-m", "arl.app.cli", *args], cwd=cwd or root,
                          timeout=timeout, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root), **(env or {})})


def one_line_exit_2(out, *fragments: str) -> str:
    """The one line a refused `arl` command printed (exit status 2, no traceback), which must
    hold every fragment."""
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()
             and "Setting accelerator to CPU" not in line]  # DeepSpeed's import notice
    assert len(lines) == 1, out.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
