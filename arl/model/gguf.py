"""GGUF files as ordinary HF model directories: convert once, cache, reuse.

transformers reads a GGUF file (with the `gguf` package) and dequantizes it into a normal
fp32 torch model. `converted` saves that as safetensors plus the tokenizer in a cache
directory named after the file and its sha256, so rollout engines and the learner load the
same thing and a second run converts nothing. The directory appears by an atomic rename only
after the saved model has been reloaded and gives the same logits as the GGUF one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import torch

from arl.errors import ModelUnavailable
from arl.files import NotOurs, sha256_file
from arl.model_source import cache_dir

MARKER = "arl_gguf.json"


def converted(source: str, cache: str | None = None) -> str:
    """The HF model folder (absolute) converted from the GGUF file `source`, in `cache`
    (default $ARL_HOME/models/gguf): converted the first time, found there later."""
    cache = cache or cache_dir("gguf")
    digest = sha256_file(source)
    stem = os.path.basename(source).removesuffix(".gguf")
    target = os.path.abspath(os.path.join(cache, f"{stem}-{digest[:12]}"))
    if os.path.isfile(os.path.join(target, MARKER)):
        return target
    os.makedirs(cache, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=cache, prefix=f".{stem}.tmp-")
    try:
        _convert(source, tmp)
        with open(os.path.join(tmp, MARKER), "w", encoding="utf-8") as f:
            json.dump({"source": os.path.basename(source), "sha256": digest}, f)
        if os.path.lexists(target):  # arl renames a conversion in only with its marker
            raise NotOurs(f"{target} is in the way of a GGUF conversion and holds no "
                          f"{MARKER}: arl replaces only its own folders; move it away")
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _convert(source: str, out: str) -> None:
    import importlib.util

    from transformers import AutoModelForCausalLM, AutoTokenizer

    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:  # transformers reads GGUF files through both
        raise ModelUnavailable(f"{os.path.basename(source)}: converting a GGUF file needs "
                               f"{' and '.join(missing)}: pip install -e '.[gguf]'")

    folder, name = os.path.dirname(source), os.path.basename(source)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    if getattr(model, "hf_quantizer", None) is not None:  # else save_pretrained refuses
        model.hf_quantizer.remove_quantization_config(model)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    probe = torch.tensor([tokenizer.encode("Hello, tic-tac-toe! 1|X|3")])
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    with torch.no_grad():
        if not torch.allclose(model(probe).logits, reloaded(probe).logits, atol=1e-4):
            raise RuntimeError(f"{source}: the converted model does not reproduce its logits")
