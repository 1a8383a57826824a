"""The model folder on every node: the driver's copy, shipped through Ray's object store to
nodes that do not see it.

On one machine, or on a cluster with a shared filesystem, every worker finds the model at
the path the driver resolved. A node without that path (or with different files there)
gets the driver's files from the object store once and keeps them in its own cache,
$ARL_HOME/models/shipped/<name>-<digest>. Workers compare cheaply first: the same names,
sizes and modification times mean the same files (a shared filesystem); only a node that
differs writes the shipped bytes, which are checked against their sha256 first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

import ray

from arl.config import ModelConfig
from arl.files import NotOurs
from arl.model_source import cache_dir

MARKER = ".arl-shipped"


@dataclass(frozen=True)
class ShippedModel:
    """A model folder as the driver has it. `files` is a one-element list holding the object
    reference of {relative path: bytes}: inside a list, Ray hands the reference to the
    worker instead of fetching the bytes, so only a node that needs them does."""

    path: str
    listing: tuple[tuple[str, int, int], ...]  # (relative path, bytes, mtime_ns), sorted
    digests: tuple[tuple[str, str], ...]  # (relative path, sha256)
    files: list[Any]


def _listing(path: str) -> tuple[tuple[str, int, int], ...]:
    out = []
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            full = os.path.join(root, name)
            stat = os.stat(full)
            out.append((os.path.relpath(full, path), stat.st_size, stat.st_mtime_ns))
    return tuple(out)


def ship(path: str) -> ShippedModel:
    """Put the model folder at `path` into the object store (driver side)."""
    listing = _listing(path)
    files = {}
    for rel, _, _ in listing:
        with open(os.path.join(path, rel), "rb") as f:
            files[rel] = f.read()
    digests = tuple((rel, hashlib.sha256(data).hexdigest()) for rel, data in files.items())
    return ShippedModel(path, listing, digests, [ray.put(files)])


def local_model(model: ModelConfig, shipped: ShippedModel | None) -> ModelConfig:
    """`model` with a path that holds the shipped files on this node (worker side): the
    driver's path where it holds the same files, else this node's cached copy, written from
    the object store the first time."""
    if shipped is None or _listing_or_none(model.path) == shipped.listing:
        return model
    tag = hashlib.sha256(repr(shipped.digests).encode()).hexdigest()[:12]
    target = cache_dir("shipped", f"{os.path.basename(os.path.normpath(shipped.path))}-{tag}")
    if not os.path.isfile(os.path.join(target, MARKER)):
        _write(target, ray.get(shipped.files[0]), dict(shipped.digests))
    return dataclasses.replace(model, path=target)


def _listing_or_none(path: str) -> tuple | None:
    return _listing(path) if os.path.isdir(path) else None


def _write(target: str, files: dict[str, bytes], digests: dict[str, str]) -> None:
    """Write `files` to `target` atomically (a temporary sibling, then a rename), each
    checked against its sha256 first."""
    for rel, data in files.items():
        if hashlib.sha256(data).hexdigest() != digests[rel]:
            raise RuntimeError(f"shipped model file {rel} does not match its sha256")
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(target)}.tmp-")
    try:
        for rel, data in files.items():
            full = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(data)
        open(os.path.join(tmp, MARKER), "w").close()
        os.chmod(tmp, 0o755)  # noqa: S103 (a model folder every worker of the node reads)
        if os.path.lexists(target) and not os.path.isfile(os.path.join(target, MARKER)):
            # a copy is only ever renamed in with its marker: this is someone else's
            raise NotOurs(f"{target} is in the way of the shipped model and holds no "
                          f"{MARKER}: arl replaces only its own folders; move it away")
        os.rename(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not os.path.isfile(os.path.join(target, MARKER)):
            raise
        # else another worker of this node renamed its copy in first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def cluster_nodes() -> int:
    """Alive nodes of the connected Ray cluster."""
    return sum(1 for node in ray.nodes() if node.get("Alive"))
