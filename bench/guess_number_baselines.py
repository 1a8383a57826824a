"""Reference players for examples/guess_number.py (1 to 20, 5 guesses), played through the
env itself: the share of numbers found, guesses an episode and reward (no shaping), over
`--episodes` fresh numbers each.

    python bench/guess_number_baselines.py [--episodes 50000]

- random: uniformly random over the whole range (what the format warm start plays)
- in_interval: uniformly random inside the interval the hints leave
- near_middle: the middle of that interval, moved by -1, 0 or +1 at random (kept inside)
- binary_search: the middle (perfect play)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from arl.config import load_config  # noqa: E402
from arl.env_spec import resolve_env  # noqa: E402
from arl.types import ToolCall  # noqa: E402

NAME = "examples.guess_number:make"


def _guess(player: str, interval: tuple[int, int], rng: random.Random) -> int:
    low, high = interval
    middle = (low + high) // 2
    return {"random": lambda: rng.randint(1, 20), "in_interval": lambda: rng.randint(low, high),
            "near_middle": lambda: min(high, max(low, middle + rng.choice((-1, 0, 1)))),
            "binary_search": lambda: middle}[player]()


def score(player: str, episodes: int, seed: int = 10**9) -> dict[str, float]:
    cfg = load_config([], [f"env.name={NAME}", "env.reward_per_bit=0"], check_paths=False).env
    spec, rng = resolve_env(NAME), random.Random(seed)
    found = guesses = reward = 0.0
    for i in range(episodes):
        env = spec.make(cfg)
        env.reset(seed + i)
        while True:
            step = env.step(ToolCall("guess", {"number": _guess(player, env.interval, rng)}))
            reward += step.reward
            if step.terminated:
                break
        found += step.outcome.kind == "found"
        guesses += len(step.outcome.actions)
    return {"found": round(found / episodes, 4), "guesses": round(guesses / episodes, 3),
            "reward": round(reward / episodes, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=50_000)
    args = parser.parse_args()
    for player in ("random", "in_interval", "near_middle", "binary_search"):
        print(json.dumps({"player": player, **score(player, args.episodes)}))


if __name__ == "__main__":
    main()
