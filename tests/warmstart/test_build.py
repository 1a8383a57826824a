"""arl/warmstart/build.py with `warmstart.base`: a format warm-up of an existing model (here a
real tiny transformers model standing in for a pretrained one), cached by what it depends on."""

from __future__ import annotations

import json
import os

import pytest
from transformers import AutoTokenizer

from arl.config import ConfigError, load_config
from arl.warmstart.build import _stamp, cached, warmstart

SETTINGS = ["warmstart.examples=24", "warmstart.batch_size=8", "warmstart.lr=1e-3",
            "warmstart.eval_episodes=4", "warmstart.prompt_loss=false"]


def _cfg(base: str, out, *extra: str):
    return load_config([], [f"warmstart.base={base}", f"warmstart.output={out}", *SETTINGS,
                            *extra], check_paths=False)


def test_a_base_model_is_warmed_up_with_its_own_tokenizer_and_cached(tiny_model_dir, tmp_path):
    out = tmp_path / "warm"
    cfg = _cfg(tiny_model_dir, out)
    record = warmstart(cfg)
    assert record["sft_losses"] and record["eval"]["episodes"] == 4
    assert json.loads((out / "warmstart.json").read_text())["stamp"] == _stamp(cfg)
    # the base's own tokenizer, not a new one
    assert AutoTokenizer.from_pretrained(out).get_vocab() == AutoTokenizer.from_pretrained(
        tiny_model_dir).get_vocab()
    assert os.path.isfile(out / "model.safetensors")
    assert cached(cfg) and warmstart(cfg) == record  # a second call does nothing
    # what the result depends on: the settings, not how it is scored
    assert _stamp(_cfg(tiny_model_dir, out, "warmstart.eval_episodes=9")) == _stamp(cfg)
    assert _stamp(_cfg(tiny_model_dir, out, "warmstart.lr=2e-3")) != _stamp(cfg)
    assert _stamp(_cfg(tiny_model_dir, out)) != _stamp(load_config(
        [], [f"warmstart.output={out}", *SETTINGS], check_paths=False))


def test_a_missing_base_is_a_config_error_naming_the_key(tmp_path):
    cfg = _cfg(str(tmp_path / "nowhere"), tmp_path / "warm")  # loads: no paths checked
    with pytest.raises(ConfigError, match="warmstart.base"):
        warmstart(cfg)
    with pytest.raises(ConfigError, match="warmstart.base"):
        load_config([], [f"warmstart.base={tmp_path / 'nowhere'}"])
