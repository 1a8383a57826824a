"""Shared fixtures: a real tiny model built offline, once per test session.

`tiny_model_dir` is a random tiny model with the project's tokenizer; `warm_model_dir` has
also had a short supervised pass on the warm-start transcripts, so that its rollouts mix
valid and invalid calls and rewards vary within groups (the learner then has work to do).
"""

from __future__ import annotations

import os
import sys

import pytest

from arl.envs.registry import env_config


def pytest_sessionfinish(session, exitstatus):
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """End the test process as soon as pytest has reported, with pytest's own exit status.

    Native threads that tests leave behind (Ray's core worker, torch's and gloo's pools) can
    crash during interpreter finalization, after every result is in: a segfault there would
    turn a passing run into a failing exit status. Ray is shut down first so that no local
    cluster outlives the run.
    """
    status = config.stash.get(_EXIT_STATUS, None)
    if status is None:
        return
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


_EXIT_STATUS = pytest.StashKey[int]()


@pytest.fixture(autouse=True, scope="session")
def _one_thread_per_process():
    # Two cores are shared by the test process and any Ray workers it starts.
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    from arl.model.tiny import build_tiny_model, build_tokenizer, save_model_dir
    from arl.warmstart.demos import corpus_texts

    path = str(tmp_path_factory.mktemp("models") / "tiny-random")
    tokenizer = build_tokenizer(corpus_texts(seed=0), 400)
    model = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, seed=0)
    save_model_dir(model, tokenizer, path)
    return path


@pytest.fixture(scope="session")
def warm_model_dir(tmp_path_factory, tiny_model_dir) -> str:
    from arl.model.causal_lm import load_model
    from arl.model.tiny import save_model_dir
    from arl.warmstart.demos import warmstart_examples
    from arl.warmstart.sft import supervised_finetune

    path = str(tmp_path_factory.mktemp("models") / "tiny-warm")
    model, tokenizer = load_model(tiny_model_dir, dtype="bfloat16")
    demos = warmstart_examples(env_config(), 384, seed=0, malformed_fraction=0.2,
                               illegal_fraction=0.3)
    examples = [(d.reset.messages, d.reset.tools, d.target) for d in demos]
    supervised_finetune(model, tokenizer, examples, epochs=2, lr=1e-2, batch_size=16, seed=0)
    save_model_dir(model, tokenizer, path)
    assert os.path.isdir(path)
    return path
