"""What the vLLM engine settles before vLLM loads (runs without vLLM: the engine then stops
at the import, naming the extra): the model reference resolved as the learner resolves it,
and the environment vLLM reads at start-up."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

from arl.errors import ModelUnavailable
from arl.rollout.engines.vllm import VLLMEngine, engine_environment

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None,
                                reason="vLLM is installed: it would load the model")


def test_float32_asks_vllm_and_triton_for_full_precision_products():
    fp32 = engine_environment("float32", 1.0)
    assert fp32["VLLM_FLOAT32_MATMUL_PRECISION"] == "highest"
    assert fp32["TRITON_F32_DEFAULT"] == "ieee"
    bf16 = engine_environment("bfloat16", 2.4)
    assert "TRITON_F32_DEFAULT" not in bf16 and bf16["VLLM_CPU_KVCACHE_SPACE"] == "2"


def test_a_cache_name_is_resolved_before_vllm_loads(warm_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ARL_HOME", str(tmp_path))
    for name in ("TRITON_F32_DEFAULT", "VLLM_FLOAT32_MATMUL_PRECISION"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ModelUnavailable):
        VLLMEngine("cache:no-such-model", dtype="float32")
    assert "TRITON_F32_DEFAULT" not in os.environ  # nothing set for a model that is not here
    shutil.copytree(warm_model_dir, tmp_path / "models" / "warm")
    with pytest.raises(ImportError, match="vllm"):  # resolved; then vLLM itself is missing
        VLLMEngine("cache:warm", dtype="float32")
    assert os.environ["TRITON_F32_DEFAULT"] == "ieee"
    assert os.environ["VLLM_FLOAT32_MATMUL_PRECISION"] == "highest"
