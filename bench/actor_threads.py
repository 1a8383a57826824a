"""Where a rollout worker's CPU goes inside a Ray actor, against the same worker in a plain
process, measured in one run.

Usage: python bench/actor_threads.py [CONFIG] [--collects 11]
       (default configs/tictactoe_move.yaml; its model must exist)

The same `RolloutWorker` (CONFIG's model, engine, env and threads) plays the same start
states first as a Ray actor, then, after `ray.shutdown()`, in this process. Around every
`collect` the worker reads each of its threads' CPU time from /proc/self/task (user +
system, in clock ticks), so the report shows whether Ray's own threads (gRPC, the core
worker's io threads) take CPU from torch's while it generates. Threads are grouped by name;
torch's OpenMP threads carry the name of the thread that started them. Prints the wall
seconds of the collects in each place, their ratio, and the CPU seconds by thread name. The
last line is JSON.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import time

import ray

from arl.config import load_config
from arl.model_source import local_path
from arl.rollout.worker import RolloutWorker
from arl.steps import start_states


def thread_ticks() -> dict[str, tuple[str, int]]:
    """{thread id: (name, user + system clock ticks)} of this process's threads."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat", encoding="utf-8") as f:
                stat = f.read()
        except OSError:  # the thread ended
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[tid] = (stat[stat.index("(") + 1:stat.rindex(")")], int(fields[11]) + int(fields[12]))
    return out


class ProbedWorker(RolloutWorker):
    """A RolloutWorker whose `probe` is `collect` with its threads' CPU time around it."""

    def probe(self, *args) -> tuple[float, dict[str, float]]:
        """(wall seconds of one collect, CPU seconds by thread name during it)."""
        before, start = thread_ticks(), time.perf_counter()
        self.collect(*args)
        wall, after = time.perf_counter() - start, thread_ticks()
        used: collections.Counter = collections.Counter()
        for tid, (name, ticks) in after.items():
            used[name] += (ticks - before.get(tid, (name, 0))[1]) / os.sysconf("SC_CLK_TCK")
        return wall, dict(used)


def measure(call, calls: list[tuple]) -> tuple[float, dict[str, float]]:
    """Total wall seconds and CPU seconds by thread name over `calls` after one warm-up."""
    call(*calls[0])
    wall, used = 0.0, collections.Counter()
    for args in calls[1:]:
        seconds, by_name = call(*args)
        wall += seconds
        used.update(by_name)
    return wall, {k: round(v, 2) for k, v in used.most_common() if v > 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="configs/tictactoe_move.yaml")
    parser.add_argument("--collects", type=int, default=11)
    args = parser.parse_args()
    cfg = load_config([args.config], [])
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(
        cfg.model, path=local_path(cfg.model.path)))
    r = cfg.rollout
    calls = [(s.env_seeds, s.group_ids, i) for i, s in
             enumerate(start_states(cfg, i) for i in range(args.collects + 1))]
    ray.init(num_cpus=2 * r.cpus_per_worker, include_dashboard=False, log_to_driver=False)
    actor = ray.remote(num_cpus=r.cpus_per_worker)(ProbedWorker).remote(
        cfg.model, r, cfg.env, r.cpus_per_worker)
    in_actor = measure(lambda *a: ray.get(actor.probe.remote(*a)), calls)
    ray.shutdown()
    plain = ProbedWorker(cfg.model, r, cfg.env, r.cpus_per_worker)
    in_process = measure(plain.probe, calls)
    print(f"{args.collects} collects: {in_actor[0]:.2f} s in a Ray actor, {in_process[0]:.2f} s "
          f"in a plain process ({in_actor[0] / in_process[0]:.3f}x)")
    print(f"CPU seconds by thread, actor: {in_actor[1]}")
    print(f"CPU seconds by thread, plain: {in_process[1]}")
    print(json.dumps({"actor_s": round(in_actor[0], 3), "plain_s": round(in_process[0], 3),
                      "actor_over_plain": round(in_actor[0] / in_process[0], 3),
                      "actor_cpu_s": in_actor[1], "plain_cpu_s": in_process[1]}))


if __name__ == "__main__":
    main()
