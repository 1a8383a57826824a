"""Synthetic transcripts for the supervised warm start, and a text corpus for the tokenizer.

The warm start must teach the chat and tool-call format but no strategy, and leave enough
mistakes that RL has something to fix: on the tictactoe_move table a random legal move
averages about +0.47, so a start near -0.5 needs about two thirds of its calls invalid or
illegal (docs/ARCHITECTURE.md, Lessons). Hence three kinds of target:
  legal      a well-formed call on a uniformly random empty square (not minimax)
  illegal    a well-formed call on a uniformly random occupied square
  malformed  a realistic mistake that does not parse to a valid call

`game_examples` makes the same kinds of target in the middle of full tictactoe games (the
conversation so far, played with random legal moves, as the prompt), so the model also knows
the full game's prompt, the tool responses, and multi-turn chats.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from arl.envs import tictactoe_rules as rules
from arl.envs.config import MoveTaskConfig, TicTacToeConfig
from arl.envs.game_env import GameEnv
from arl.envs.registry import env_config, make_env
from arl.envs.tictactoe import make_tictactoe
from arl.envs.tictactoe_move import TicTacToeMoveEnv
from arl.protocols import Env
from arl.tools import format_tool_call, parse_tool_call
from arl.types import EnvReset, Message, ParsedTurn, ToolCall

KINDS = ("legal", "illegal", "malformed")
# Bumped whenever the transcripts change for the same settings (the warm-start cache keys on
# it). 2: no board of a held-out symmetry class (envs.tictactoe_rules.held_out) appears.
DATA_VERSION = 2


@dataclass(frozen=True)
class Demo:
    """One warm-start example: the episode's opening, the assistant's text, and its kind."""

    reset: EnvReset
    target: str
    kind: str  # one of KINDS


def warmstart_examples(cfg: MoveTaskConfig, n: int, seed: int, malformed_fraction: float,
                       illegal_fraction: float) -> list[Demo]:
    """`n` tictactoe_move demos, deterministic in `seed`.

    Exactly round(n * malformed_fraction) malformed and round(n * illegal_fraction) illegal
    targets, the rest legal, in shuffled order. Boards come from the env's own seeds; an
    illegal example redraws until its board has an occupied square.
    """
    if cfg.name != "tictactoe_move":
        raise ValueError(f"warm-start demos exist for tictactoe_move only, not {cfg.name!r}")
    n_malformed, n_illegal = round(n * malformed_fraction), round(n * illegal_fraction)
    if not (0 <= n_malformed and 0 <= n_illegal and n_malformed + n_illegal <= n):
        raise ValueError("fractions must be >= 0 and sum to at most 1")
    rng = random.Random(seed)
    kinds = ["malformed"] * n_malformed + ["illegal"] * n_illegal
    kinds += ["legal"] * (n - len(kinds))
    rng.shuffle(kinds)
    env = TicTacToeMoveEnv(cfg)
    demos = []
    for kind in kinds:
        reset = env.reset(rng.randrange(2**31))
        while kind == "illegal" and not rules.occupied_squares(env.board):
            reset = env.reset(rng.randrange(2**31))
        demos.append(Demo(reset, _target(kind, env.board, rng), kind))
    return demos


def game_examples(cfg: TicTacToeConfig, n: int, seed: int, malformed_fraction: float) -> list[Demo]:
    """`n` demos from full tictactoe games, deterministic in `seed`: a game (with the env's
    opponent; `cfg.name` must be "tictactoe") is played with uniformly random legal calls for a
    uniformly random number of turns, and the demo's prompt is the conversation so far.
    round(n * malformed_fraction) targets are malformed, the rest legal, in shuffled order."""
    if cfg.name != "tictactoe":
        raise ValueError(f"game demos exist for tictactoe only, not {cfg.name!r}")
    rng = random.Random(seed)
    kinds = legal_or_malformed(n, malformed_fraction, rng)
    env = make_tictactoe(cfg)
    demos = []
    for kind in kinds:
        prompt = _game_prefix(env, rng)
        demos.append(Demo(prompt, _target(kind, env.board, rng), kind))
    return demos


def legal_or_malformed(n: int, malformed_fraction: float, rng: random.Random) -> list[str]:
    """`n` target kinds in `rng`'s shuffled order: exactly round(n * malformed_fraction)
    "malformed", the rest "legal"."""
    n_malformed = round(n * malformed_fraction)
    if not 0 <= n_malformed <= n:
        raise ValueError("malformed_fraction must be in [0, 1]")
    kinds = ["malformed"] * n_malformed + ["legal"] * (n - n_malformed)
    rng.shuffle(kinds)
    return kinds


def _game_prefix(env: GameEnv, rng: random.Random) -> EnvReset:
    """Reset `env`, play random legal calls for a random number of the agent's turns (redrawn
    if the game ends), and return the conversation so far with the env's tools."""
    while True:
        reset = env.reset(rng.randrange(2**31))
        messages = list(reset.messages)
        turns = rng.randint(0, len(rules.legal_moves(env.board)) // 2)
        for _ in range(turns):
            text = _call(rng.choice(rules.legal_moves(env.board)))
            step = env.step(parse_tool_call(text, reset.tools))
            messages += [Message("assistant", text), *step.messages]
            if step.terminated or step.truncated:
                break
        else:
            return EnvReset(messages=tuple(messages), tools=reset.tools)


def _call(square: object, arg: str = "square") -> str:
    return format_tool_call(ToolCall("choose_square", {arg: square}))


def _target(kind: str, board: rules.Board, rng: random.Random) -> str:
    if kind == "legal":
        return _call(rng.choice(rules.legal_moves(board)))
    if kind == "illegal":
        return _call(rng.choice(rules.occupied_squares(board)))
    return malformed_call(rng.choice(rules.legal_moves(board)), rng)


def malformed_call(square: int, rng: random.Random) -> str:
    """A realistic mistake around `square`: one family picked uniformly, then one variant."""
    good = _call(square)
    body = good.removeprefix("<tool_call>").removesuffix("</tool_call>")
    families = (
        lambda: rng.choice((f"<tool_call>{body}", f"<tool_call>{body}<tool_call>")),  # no close
        lambda: rng.choice((  # broken JSON
            good.replace("}}", "}"),
            good.replace('"', "'"),
            good.replace(f"{square}}}", f"{square},}}"),
        )),
        lambda: _call(square, rng.choice(("position", "cell", "move"))),  # wrong argument name
        lambda: _call(str(square)),  # square as a string
        lambda: _call(rng.choice((0, 10))),  # out of range
        lambda: rng.choice((  # plain text, no call
            f"I choose square {square}.", f"Square {square}.", f"My move: {square}",
        )),
    )
    return rng.choice(families)()


def corpus_texts(episodes: int = 60, seed: int = 0) -> list[str]:
    """Representative strings of all three envs for training a small tokenizer: system and
    user prompts, boards, tool schemas as JSON, well-formed and malformed calls, env replies
    (moves, errors with the parser's messages, retries, endings).

    Episodes are played by a random player against random opponents, half with
    invalid_action="end" and half "retry"; repeats are kept so frequencies stay representative.
    """
    rng = random.Random(seed)
    texts = [d.target for d in warmstart_examples(env_config(), episodes, seed, 0.5, 0.2)]
    for name in ("tictactoe_move", "tictactoe", "connect_four"):
        for i in range(episodes):
            action = ("end", "retry")[i % 2]
            game = {"opponent": "random", "invalid_action": action}
            cfg = env_config(name, **(game if name != "tictactoe_move" else {}))
            env = make_env(cfg)
            reset = env.reset(rng.randrange(2**31))
            texts += [m.content for m in reset.messages]
            texts += [json.dumps(t.as_dict()) for t in reset.tools]
            texts += _random_play(env, reset, rng)
    return texts


def _random_play(env: Env, reset: EnvReset, rng: random.Random) -> list[str]:
    """Calls and replies of one random-player episode. Some turns are malformed on purpose
    and go through the real parser, so the corpus holds its actual error messages."""
    tool = reset.tools[0]
    arg, top = ("column", 7) if tool.name == "drop_piece" else ("square", 9)
    texts = []
    for _ in range(100):
        text = format_tool_call(ToolCall(tool.name, {arg: rng.randint(1, top)}))
        if rng.random() < 0.15:
            text = malformed_call(rng.randint(1, top), rng).replace("choose_square", tool.name)
            text = text.replace('"square"', f'"{arg}"')
        texts.append(text)
        turn: ParsedTurn = parse_tool_call(text, reset.tools)
        step = env.step(turn)
        texts += [m.content for m in step.messages]
        if step.terminated or step.truncated:
            break
    return texts
