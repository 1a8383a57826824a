"""Reference points for an OpenSpiel game against OpenSpiel's uniformly random bot, exact (no
sampling), averaged over the agent's two seats as `env.seat: random` draws them: a uniformly
random legal policy, the best response to the bot (perfect play against it), and the game's
value at equilibrium (both sides perfect). Rewards are the agent's returns, as the OpenSpiel
env pays them (`env.reward_scale: 1`).

    python bench/openspiel_baselines.py [--game kuhn_poker]
"""

from __future__ import annotations

import argparse
import json

import pyspiel
from open_spiel.python import policy as policy_lib
from open_spiel.python.algorithms import best_response, expected_game_score


def baselines(game_name: str) -> dict[str, float]:
    game = pyspiel.load_game(game_name)
    uniform = policy_lib.UniformRandomPolicy(game)
    root = game.new_initial_state()
    random_values = expected_game_score.policy_value(root, [uniform, uniform])
    best = [best_response.BestResponsePolicy(game, seat, uniform).value(root) for seat in (0, 1)]
    out = {"random_legal": sum(random_values) / 2, "best_response": sum(best) / 2}
    if game.get_type().information == pyspiel.GameType.Information.IMPERFECT_INFORMATION:
        from open_spiel.python.algorithms import cfr

        solver = cfr.CFRPlusSolver(game)
        for _ in range(300):
            solver.evaluate_and_update_policy()
        nash = solver.average_policy()
        versus = [expected_game_score.policy_value(root, [nash, uniform])[0],
                  expected_game_score.policy_value(root, [uniform, nash])[1]]
        out["equilibrium_vs_random"] = sum(versus) / 2
    return {k: round(v, 4) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="kuhn_poker")
    args = parser.parse_args()
    print(json.dumps({"game": args.game, "opponent": "random", **baselines(args.game)}))


if __name__ == "__main__":
    main()
