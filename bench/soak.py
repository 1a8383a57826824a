"""A soak: many steps of one config, watching memory, file descriptors and processes.

Usage: python bench/soak.py CONFIG [key=value ...] [--every S] [--warmup N]
  e.g. python bench/soak.py configs/tictactoe_move.yaml steps=2000

Trains in this process on an embedded Ray cluster (`ray.address=local`, outputs under a
temporary directory) while a thread samples, every S seconds (default 2): the RSS of every
process of the run (the driver, each actor, Ray's own daemons), Ray's object-store bytes in
use, the used bytes of /dev/shm, open file descriptors and the number of live processes.

It prints, per process, RSS at step N (default 100, the warm-up) and at the end with their
ratio, the same for the object store, /dev/shm, descriptors and processes; then, after the
run exits, /dev/shm against its level before the run and any process of the run still alive.
The last line is JSON. A process's growth is (RSS at the end) / (RSS at step N).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field

import psutil

from arl.app.train import train
from arl.config import load_config
from arl.errors import UserError

MIB = 2**20


@dataclass
class Sample:
    step: int  # steps logged so far
    rss: dict[str, int]  # process label -> bytes
    store: int  # object-store bytes in use
    shm: int  # used bytes of /dev/shm
    fds: int  # open descriptors over all processes of the run
    procs: int  # live processes of the run


@dataclass
class Sampler:
    metrics_path: str
    every: float
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _steps: int = 0
    _offset: int = 0

    def run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.samples.append(self.sample())
            except (psutil.Error, OSError):
                continue  # a process ended between listing and reading it
            except Exception:  # Ray's RPCs fail while the cluster shuts down at the end
                continue

    def steps(self) -> int:
        """Rows in metrics.jsonl, read incrementally (the file only grows, or is rewound)."""
        if not os.path.exists(self.metrics_path):
            return 0
        with open(self.metrics_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() < self._offset:  # rewound (a learner restart)
                self._offset = self._steps = 0
            f.seek(self._offset)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        self._steps += complete.count(b"\n")
        return self._steps

    def sample(self) -> Sample:
        me = psutil.Process()
        procs = [me, *me.children(recursive=True)]
        rss, fds = {}, 0
        for p in procs:
            with p.oneshot():
                rss[label(p, me)] = p.memory_info().rss
                fds += p.num_fds()
        return Sample(self.steps(), rss, object_store_bytes(), shm_used(), fds, len(procs))

    def stop(self) -> None:
        self._stop.set()


def label(p: psutil.Process, me: psutil.Process) -> str:
    """'driver', an actor's class (`ray::LearnerActor`), or a daemon's name, with its pid."""
    if p.pid == me.pid:
        return "driver"
    args = p.cmdline()
    name = args[0] if args and args[0].startswith("ray::") else p.name()
    return f"{name.split('.')[0]} [{p.pid}]"


def object_store_bytes() -> int:
    """Bytes in use in Ray's object store, as `ray memory --stats-only` reports them (0
    before the cluster is up)."""
    import ray
    from ray._private.internal_api import get_memory_info_reply, get_state_from_address

    if not ray.is_initialized():
        return 0
    return int(get_memory_info_reply(get_state_from_address()).store_stats
               .object_store_bytes_used)


def shm_used() -> int:
    st = os.statvfs("/dev/shm")
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def at_step(samples: list[Sample], step: int) -> Sample:
    """The first sample taken once `step` steps were logged (else the last one)."""
    return next((s for s in samples if s.step >= step), samples[-1])


def report(samples: list[Sample], warmup: int, shm_before: int, shm_after: int,
           leftover: list[str]) -> dict:
    start = at_step(samples, warmup)
    # The last sample with every process of the warm-up still there (not during teardown).
    end = next((s for s in reversed(samples) if set(start.rss) <= set(s.rss)), samples[-1])
    rows = {}
    print(f"{'process':<34}{'MiB @' + str(start.step):>12}{'MiB end':>10}{'growth':>9}")
    for name in sorted(set(start.rss) & set(end.rss)):
        a, b = start.rss[name] / MIB, end.rss[name] / MIB
        rows[name] = {"start_mib": round(a, 1), "end_mib": round(b, 1),
                      "growth": round(b / a - 1, 4)}
        print(f"{name:<34}{a:>12.1f}{b:>10.1f}{b / a - 1:>+9.1%}")
    peak_store = max(s.store for s in samples)
    out = {
        "steps": end.step, "warmup_step": start.step, "processes": rows,
        "max_rss_growth": max((r["growth"] for r in rows.values()), default=0.0),
        "object_store_mib": {"at_warmup": start.store / MIB, "peak": peak_store / MIB,
                             "at_end": end.store / MIB},
        "dev_shm_mib": {"before": shm_before / MIB, "at_warmup": start.shm / MIB,
                        "peak": max(s.shm for s in samples) / MIB, "after": shm_after / MIB},
        "fds": {"at_warmup": start.fds, "at_end": end.fds},
        "live_processes": {"at_warmup": start.procs, "at_end": end.procs},
        "leftover_processes": leftover,
    }
    for key in ("object_store_mib", "dev_shm_mib", "fds", "live_processes"):
        print(f"{key:<34}" + "  ".join(f"{k} {v:.1f}" if isinstance(v, float) else
                                       f"{k} {v}" for k, v in out[key].items()))
    print(f"leftover processes after the run: {leftover or 'none'}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="+", help="YAML file(s), then key=value overrides")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between samples")
    parser.add_argument("--warmup", type=int, default=100, help="step the growth starts at")
    args = parser.parse_args()
    files = [a for a in args.config if "=" not in a]
    overrides = [a for a in args.config if "=" in a]
    out_dir = tempfile.mkdtemp(prefix="arl-soak-")
    try:
        cfg = load_config(files, [*overrides, f"output_dir={out_dir}", "ray.address=local"])
    except UserError as err:
        raise SystemExit(f"soak: {err}") from None
    shm_before = shm_used()
    sampler = Sampler(os.path.join(out_dir, cfg.run_name, "metrics.jsonl"), args.every)
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    t0 = time.perf_counter()
    train(cfg)
    sampler.stop()
    thread.join()
    time.sleep(2.0)  # let the cluster's processes finish exiting
    leftover = [label(p, psutil.Process()) for p in psutil.Process().children(recursive=True)]
    print(f"{cfg.steps} steps in {time.perf_counter() - t0:.0f} s; outputs in {out_dir}")
    print(json.dumps(report(sampler.samples, args.warmup, shm_before, shm_used(), leftover)))


if __name__ == "__main__":
    main()
