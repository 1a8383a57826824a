"""Weight sync transports: how a new policy version travels from learner rank 0 to every
rollout worker (`weight_sync.transport`).

object_store (the default, one node): learner rank 0 exports its weights once, Ray puts them
    in the object store, and every rollout worker maps that one copy (arl/actors/weight_sync.py).
nccl | gloo (a collective): learner rank 0 and the W rollout workers form a process group of
    their own, 1 + W members (NCCL between GPUs; gloo over TCP between CPU processes, e.g. CPU
    nodes of a cluster). Each sync is one control call per member; learner rank 0 then
    broadcasts the weights in buckets of `weight_sync.bucket_mib` MiB, in the rollout dtype,
    and each worker loads what it received with its engine's own call. The tensors never
    pass through the driver or the object store.

Both transports deliver the same thing: {HF name: tensor}, tied names included, which the
engine casts to its dtype. A group is fixed once formed; when a rollout worker is rebuilt,
the driver forms a new one (`join`) before the next collective sync.
"""

from __future__ import annotations

import datetime
import math
import os
import socket
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from arl.model.causal_lm import torch_dtype


@dataclass(frozen=True)
class Layout:
    """What every broadcast carries, fixed for a run: the unique tensors in order, and the
    names that share one of them (tied weights)."""

    names: tuple[str, ...]  # the first name of each unique tensor
    shapes: tuple[tuple[int, ...], ...]
    aliases: tuple[tuple[str, str], ...]  # (other name, first name)
    dtype: str  # the rollout dtype: bfloat16 | float32

    def shapes_by_name(self) -> dict[str, tuple[int, ...]]:
        """Every name a broadcast delivers, tied names included, with its shape."""
        shapes = dict(zip(self.names, self.shapes, strict=True))
        return {**shapes, **{name: shapes[source] for name, source in self.aliases}}

    def buckets(self, bucket_bytes: int) -> list[list[int]]:
        """Consecutive tensor indices, each run at most `bucket_bytes` (a larger tensor goes
        alone)."""
        size = torch.empty((), dtype=torch_dtype(self.dtype)).element_size()
        out: list[list[int]] = [[]]
        used = 0
        for i, shape in enumerate(self.shapes):
            nbytes = math.prod(shape) * size
            if out[-1] and used + nbytes > bucket_bytes:
                out.append([])
                used = 0
            out[-1].append(i)
            used += nbytes
        return [b for b in out if b]


def layout_of_shapes(entries: Iterable[tuple[str, tuple[int, ...], int]], dtype: str) -> Layout:
    """The layout of weights given as (name, shape, key), where tied names share a key
    (`learner.state.weight_shapes`: parameter metadata, no tensor is read)."""
    names, shapes, aliases, first = [], [], [], {}
    for name, shape, key in entries:
        if key in first:
            aliases.append((name, first[key]))
            continue
        first[key] = name
        names.append(name)
        shapes.append(tuple(shape))
    return Layout(tuple(names), tuple(shapes), tuple(aliases), dtype)


def layout_of(state: Iterable[tuple[str, torch.Tensor]], dtype: str) -> Layout:
    """The layout of full weights {name: tensor}.items(), where tied names share a tensor."""
    return layout_of_shapes(((n, tuple(t.shape), id(t)) for n, t in state), dtype)


class SyncGroup:
    """One member's end of a weight-sync group: rank 0 sends, the others receive."""

    def __init__(self, address: str, port: int, rank: int, world: int, backend: str,
                 timeout_s: float):
        """Every member calls this at the same time; rank 0 hosts the rendezvous store on
        address:port. Buckets travel on the GPU (nccl) or the CPU (gloo). Raises if the
        others do not arrive within `timeout_s`."""
        timeout = datetime.timedelta(seconds=timeout_s)
        store = rendezvous(address, port, rank, world, timeout)  # on `address` alone
        listen_on(address)
        if backend == "nccl":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            self.group = dist.ProcessGroupNCCL(store, rank, world, options)
        elif backend == "gloo":
            self.group = dist.ProcessGroupGloo(store, rank, world, timeout)
        else:
            raise ValueError(f"weight-sync backend must be nccl | gloo, got {backend!r}")
        self._store = store  # kept alive with the group
        self.rank = rank
        self.device = torch.device("cuda" if backend == "nccl" else "cpu")

    def send(self, state: Mapping[str, torch.Tensor], layout: Layout, bucket_bytes: int) -> None:
        """Broadcast `state` (rank 0), bucket by bucket, cast to the layout's dtype."""
        dtype = torch_dtype(layout.dtype)
        for bucket in layout.buckets(bucket_bytes):
            flat = torch.cat([state[layout.names[i]].detach().reshape(-1).to(dtype)
                              for i in bucket]).to(self.device)
            self.group.broadcast([flat], _root()).wait()

    def receive_stream(self, layout: Layout,
                       bucket_bytes: int) -> Iterator[tuple[str, torch.Tensor]]:
        """Receive one `send` (ranks > 0) lazily: (name, tensor) pairs, a bucket's worth at a
        time, each tied name right after the tensor it shares. A bucket is received when the
        consumer reaches it, so a consumer that copies each tensor away (vLLM's weight
        loader) holds one bucket, not the model. The stream must be read to its end: every
        bucket is one collective call the sender waits on."""
        dtype = torch_dtype(layout.dtype)
        tied: dict[str, list[str]] = {}
        for name, source in layout.aliases:
            tied.setdefault(source, []).append(name)
        for bucket in layout.buckets(bucket_bytes):
            sizes = [math.prod(layout.shapes[i]) for i in bucket]
            flat = torch.empty(sum(sizes), dtype=dtype, device=self.device)
            self.group.broadcast([flat], _root()).wait()
            for i, part in zip(bucket, flat.split(sizes), strict=True):
                tensor = part.view(layout.shapes[i])
                for name in (layout.names[i], *tied.get(layout.names[i], ())):
                    yield name, tensor
            del flat

    def close(self) -> None:
        abort = getattr(self.group, "abort", None)  # NCCL: free the communicator now
        if abort is not None:
            abort()
        self.group = None


def _root() -> dist.BroadcastOptions:
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    return opts


def rendezvous(address: str, port: int, rank: int, world: int,
               timeout: datetime.timedelta) -> dist.TCPStore:
    """The group's key-value store: rank 0 hosts it on address:port (bound to `address`
    alone: torch's own server would listen on every interface), the others connect."""
    if rank != 0:
        return dist.TCPStore(address, port, world, False, timeout)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(max(world, 16))
        store = dist.TCPStore(address, port, world, True, timeout,
                              master_listen_fd=sock.fileno())
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the store's server owns the descriptor now
    return store


def listen_on(address: str) -> None:
    """Make gloo and NCCL, created after this call in this process, listen on the network
    interface that holds `address` (the node's address Ray uses: loopback on one machine),
    unless GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME already say where."""
    interface = interface_of(address)
    if interface is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", interface)


def interface_of(address: str) -> str | None:
    """The name of this machine's network interface that holds `address`, or None."""
    import ipaddress

    import psutil

    try:
        wanted = ipaddress.ip_address(address)
    except ValueError:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        for addr in addrs:
            try:
                if ipaddress.ip_address(addr.address.split("%")[0]) == wanted:
                    return name
            except ValueError:
                continue
    return None


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now at `address` (for a rendezvous this process will
    host there)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family) as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]
