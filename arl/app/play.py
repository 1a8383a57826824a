"""`arl play CHECKPOINT`: a person plays tic-tac-toe against the agent in the terminal.

The board is drawn before every move of the person's; for every move of the agent's the
page shows what it replied, the square it chose and the probability its policy gives that
reply, with its next likeliest squares. The agent plays greedily, with its chat exactly as
in training (the same env, prompts and parser); the person is the env's opponent.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from arl.envs import tictactoe_rules as rules
from arl.envs.config import TicTacToeConfig
from arl.envs.tictactoe import CHOOSE_SQUARE, make_tictactoe
from arl.episode import ChatRenderer, parse_turn
from arl.model.causal_lm import token_logprobs
from arl.model.checkpoint.runs import resolve_checkpoint
from arl.tools import format_tool_call
from arl.types import Message, SamplingParams, ToolCall

MAX_NEW_TOKENS = 48
OUTCOME_WORDS = {"win": "The agent wins.", "loss": "You win.", "draw": "Draw.",
                 "invalid": "The agent made an invalid move: you win."}


class Quit(Exception):
    """The person asked to stop (q, or the end of their input)."""


class HumanOpponent:
    """The env's opponent, played by a person: draws the board, reads a square."""

    def __init__(self, read: Callable[[str], str], write: Callable[[str], None]):
        self._read, self._write = read, write

    def choose(self, board: rules.Board, player: str, rng: random.Random) -> int:
        self._write(f"\n{rules.render(board)}\n")
        while True:
            try:
                answer = self._read(f"your move as {player} (1-9, q to quit): ").strip()
            except EOFError:
                raise Quit from None
            if answer.lower() in ("q", "quit", "exit"):
                raise Quit
            if answer.isdigit() and int(answer) in rules.legal_moves(board):
                return int(answer)
            self._write(f"{answer!r} is not an empty square; the empty ones are "
                        f"{', '.join(map(str, rules.legal_moves(board)))}\n")


def square_probabilities(engine, prompt: list[int], stop_id: int) -> dict[int, float]:
    """The policy's probability of replying with exactly the well-formed call on each square
    (the reply the warm start taught), given the conversation `prompt`."""
    tokenizer = engine.get_tokenizer()
    calls = {sq: tokenizer.encode(format_tool_call(ToolCall(CHOOSE_SQUARE.name,
                                                            {"square": sq})),
                                  add_special_tokens=False) + [stop_id] for sq in range(1, 10)}
    longest = max(len(c) for c in calls.values())
    ids = torch.full((9, len(prompt) + longest), engine.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, call in enumerate(calls.values()):
        seq = prompt + call
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    with torch.no_grad():
        logprobs = token_logprobs(engine.model, ids, mask).double()  # [9, T]
    out = {}
    for row, (sq, call) in enumerate(calls.items()):
        span = slice(len(prompt), len(prompt) + len(call))
        out[sq] = float(torch.exp(logprobs[row, span].sum()))
    return out


def play(checkpoint: str, you: str = "X", dtype: str = "auto",
         read: Callable[[str], str] = input,
         write: Callable[[str], None] = lambda s: print(s, end="", flush=True)) -> int:
    """One game, the person as `you` (X moves first). Returns 0 (also when they quit)."""
    from arl.rollout.evaluation import load_policy

    path = resolve_checkpoint(checkpoint)
    engine = load_policy(path, dtype)
    tokenizer = engine.get_tokenizer()
    renderer = ChatRenderer(tokenizer, stop_token=tokenizer.eos_token)
    env = make_tictactoe(_game_config(path), opponent=HumanOpponent(read, write))
    agent = rules.other(you)
    seed = next(s for s in range(100) if random.Random(s).choice(("X", "O")) == agent)
    write(f"you play {you} against the policy of {path}; squares are numbered 1-9, row by "
          "row\n")
    try:
        _game(engine, renderer, env, seed, write)
    except Quit:
        write("\nbye\n")
    return 0


def _game_config(path: str) -> TicTacToeConfig:
    """The game as the checkpoint's run asked its moves: the board format, and each turn on
    the board alone where the run trained so (a one-move run in context board, or full
    games in context board); otherwise in one conversation."""
    from arl.model.checkpoint.runs import trained_env

    trained = trained_env(path)
    board_only = trained.get("context") == "board"
    board_format = trained.get("board_format")
    return TicTacToeConfig(name="tictactoe", context="board" if board_only else "game",
                           board_format=board_format if board_format == "grid" else "lists")


def _game(engine, renderer: ChatRenderer, env, seed: int, write: Callable[[str], None]) -> None:
    start = env.reset(seed)  # the person moves first here if they play X
    ids, messages = renderer.prompt_ids(start), list(start.messages)
    greedy = SamplingParams(0.0, 1.0, MAX_NEW_TOKENS, 0)
    while True:
        gen = engine.generate([ids], greedy)[0]
        body = gen.token_ids[:-1] if gen.finished else gen.token_ids
        text = renderer.tokenizer.decode(body.tolist(), skip_special_tokens=False)
        probs = square_probabilities(engine, ids, renderer.stop_id)
        turn = parse_turn(text, gen.finished, start.tools)
        square = turn.arguments.get("square") if isinstance(turn, ToolCall) else None
        ranked = sorted(probs.items(), key=lambda kv: -kv[1])
        others = ", ".join([f"{sq} ({p:.2f})" for sq, p in ranked if sq != square][:3])
        chosen = (f"square {square} (p = {probs.get(square, 0.0):.2f})" if square
                  else f"no valid call: {text!r}")
        write(f"\nagent plays {chosen}; its next likeliest squares: {others}\n")
        step = env.step(turn)  # the person answers inside, as the env's opponent
        if step.terminated or step.truncated:
            write(f"\n{rules.render(env.board)}\n{OUTCOME_WORDS[step.outcome.kind]}\n")
            return
        if step.restart is not None:  # the next turn is asked in a new conversation
            start = step.restart
            ids, messages = renderer.prompt_ids(start), list(start.messages)
            continue
        history = [*messages, Message("assistant", text)]
        ids = ids + gen.token_ids.tolist() + renderer.reply_ids(history, step.messages,
                                                                start.tools)
        messages = [*history, *step.messages]

