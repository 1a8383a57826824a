"""A Kuhn poker checkpoint's greedy policy, read exactly: the action it takes in every
information state it meets, beside the best response to OpenSpiel's random bot, and that
policy's exact value against the bot (no sampling noise), then its mean return over fresh
hands beside perfect play's on the same hands. The `log-odds` column is the model's exact
log P(pass) / P(bet) in each state (both replies scored whole, the stop token included):
it shows how far the policy is from changing its mind, and whether it reads the state at
all (the same value in every state: it does not).

    python bench/kuhn_policy.py runs/kuhn_poker [--hands 1000]

Greedy replies depend only on the conversation, and in Kuhn poker the conversation is fixed
by the information state, so the hands played name the policy's whole table once every
state has come up (a missing state is reported).
"""

from __future__ import annotations

import argparse
import json
import re

import numpy as np
import torch
from open_spiel.python import policy as policy_lib
from open_spiel.python.algorithms import expected_game_score

from arl.config import load_config
from arl.env_spec import resolve_env
from arl.envs.openspiel_env import _best_response, load_game
from arl.model.checkpoint.runs import resolve_checkpoint
from arl.rollout.evaluation import _renderer, load_policy, play
from arl.rollout.reference import play_reference
from arl.tools import format_tool_call
from arl.types import EnvReset, Message, SamplingParams, ToolCall

FRESH_SEED = 10**9  # as the results pages: far from any seed a run trains on
INFO = re.compile(r"Your information state: (\S+)")
MOVE = re.compile(r'"(?:move|action|number)"\s*:\s*(\d+)')


def greedy_table(episodes) -> dict[str, int]:
    """info state -> the legal-action index (1-based, as the tool takes it) played there."""
    table: dict[str, int] = {}
    for t in episodes:
        info = None
        for m in t.messages:
            if m.role in ("user", "tool") and INFO.search(m.content):
                info = INFO.findall(m.content)[-1]
            elif m.role == "assistant" and info is not None:
                found = MOVE.search(m.content)
                table[info] = int(found.group(1)) if found else 0
                info = None
    return table


def state_prompts(env_cfg, seeds: int = 400) -> dict[str, EnvReset]:
    """One conversation per information state the agent can be asked to move in: the
    opening ones, and those after its own first pass."""
    env = resolve_env(env_cfg.name).make(env_cfg)
    prompts: dict[str, EnvReset] = {}
    for seed in range(seeds):
        start = env.reset(seed)
        prompts.setdefault(INFO.findall(start.messages[-1].content)[-1], start)
        tool = start.tools[0]
        passed = ToolCall(tool.name, {env_cfg.tool_arg: 1})
        step = env.step(passed)
        if not step.terminated:
            history = (*start.messages, Message("assistant", format_tool_call(passed)),
                       *step.messages)
            info = INFO.findall(step.messages[-1].content)[-1]
            prompts.setdefault(info, EnvReset(history, start.tools))
    return prompts


def pass_log_odds(engine, env_cfg) -> dict[str, float]:
    """info state -> log P(pass) - log P(bet) under the policy, each reply scored whole."""
    renderer = _renderer(engine)
    odds = {}
    for info, start in state_prompts(env_cfg).items():
        prompt = renderer.prompt_ids(start)
        scores = []
        for move in (1, 2):
            reply = [*renderer.encode(format_tool_call(
                ToolCall(start.tools[0].name, {env_cfg.tool_arg: move}))), renderer.stop_id]
            with torch.no_grad():
                logits = engine.model(torch.tensor([prompt + reply])).logits.float()
            logprobs = torch.log_softmax(logits[0, len(prompt) - 1:-1], dim=-1)
            scores.append(float(logprobs[torch.arange(len(reply)), reply].sum()))
        odds[info] = scores[0] - scores[1]
    return odds


def exact_value(game, table: dict[str, int]) -> float:
    """The tabular policy's exact mean return against the uniformly random bot, over both
    seats (as `env.seat: random` draws them); an unseen or invalid state plays uniformly."""
    uniform = policy_lib.UniformRandomPolicy(game)
    mine = policy_lib.TabularPolicy(game)
    for info, index in table.items():
        if info not in mine.state_lookup:
            continue
        row = mine.policy_for_key(info)
        legal = np.flatnonzero(row > 0) if row.sum() else np.arange(len(row))
        if 1 <= index <= len(legal):
            row[:] = 0.0
            row[legal[index - 1]] = 1.0
    root = game.new_initial_state()
    return (expected_game_score.policy_value(root, [mine, uniform])[0]
            + expected_game_score.policy_value(root, [uniform, mine])[1]) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run directory or checkpoint")
    parser.add_argument("--hands", type=int, default=1000)
    args = parser.parse_args()
    checkpoint = resolve_checkpoint(args.run)
    env_cfg = load_config([f"{args.run}/config.json"], check_paths=False).env
    game = load_game(env_cfg.game)
    engine = load_policy(checkpoint)
    episodes = play(engine, env_cfg, args.hands, 1, SamplingParams(0.0, 1.0, 48, FRESH_SEED))
    odds = pass_log_odds(engine, env_cfg)
    table = greedy_table(episodes)
    rows, agree = [], 0
    for info in sorted(set(table) | set(odds)):  # with the states greedy play never reaches
        seat = 0 if len(info) % 2 else 1  # the card, then the bets: the seat by parity
        best = _best_response(env_cfg.game, seat).best_response_action(info)
        rows.append((info, seat, table.get(info), best))
        agree += info in table and table[info] - 1 == best  # legal: always pass, bet
    perfect = play_reference(env_cfg, "perfect", args.hands, FRESH_SEED)
    rewards = np.array([t.reward for t in episodes])
    report = {
        "checkpoint": checkpoint, "hands": args.hands,
        "greedy_mean": round(float(rewards.mean()), 4),
        "greedy_se": round(float(rewards.std() / np.sqrt(len(rewards))), 4),
        "perfect_same_hands": round(float(np.mean([p.reward for p in perfect])), 4),
        "greedy_exact_value": round(exact_value(game, table), 4),
        "states_seen": len(table), "states_best_response": agree,
    }
    names = {0: "pass", 1: "bet"}
    print(f"{'info state':<10} seat  greedy  best response  log-odds pass:bet")
    for info, seat, index, best in rows:
        greedy = "unseen" if index is None else names.get(index - 1, "invalid")
        print(f"{info:<10} {seat:>4}  {greedy:>6}  {names[best]:>13}"
              f"  {odds.get(info, float('nan')):>17.2f}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
