"""The full-game env shared by tic-tac-toe and connect four, and the turn reader every env uses.

A game is described by a `GameSpec` (its rules as plain functions plus a few words), so the
episode logic (opponent replies, invalid calls, retries, rewards) exists once. X always moves
first; the seed picks the agent's mark, so the opponent opens when the agent plays O.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from arl.envs.config import FullGameConfig, MoveTaskConfig
from arl.envs.opponents import Opponent
from arl.types import (
    EnvReset,
    EnvStep,
    Message,
    Outcome,
    ParsedTurn,
    ToolCallError,
    ToolCallErrorKind,
    ToolSchema,
)

Board = tuple[str, ...]


def move_tool(name: str, arg: str, maximum: int, description: str, arg_help: str) -> ToolSchema:
    """A tool with one required integer argument in 1..maximum and nothing else."""
    prop = {"type": "integer", "minimum": 1, "maximum": maximum, "description": arg_help}
    return ToolSchema(
        name=name,
        description=description,
        parameters={
            "type": "object",
            "properties": {arg: prop},
            "required": [arg],
            "additionalProperties": False,
        },
    )


def read_move(turn: ParsedTurn, tool: ToolSchema, arg: str, maximum: int) -> int | ToolCallError:
    """The move a turn names, or why it names none.

    Envs re-check the call against their own schema because a ToolCall may come from anywhere
    (tests, other parsers): a wrong tool name gives UNKNOWN_TOOL; anything but exactly
    `{arg: int in 1..maximum}` gives INVALID_ARGUMENTS. Whether the move is legal on the
    board is the env's business, not this function's.
    """
    if isinstance(turn, ToolCallError):
        return turn
    if turn.name != tool.name:
        return ToolCallError(ToolCallErrorKind.UNKNOWN_TOOL, f"unknown tool {turn.name!r}")
    args = turn.arguments if isinstance(turn.arguments, dict) else {}
    value = args.get(arg)
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if set(args) != {arg} or not is_int or not 1 <= value <= maximum:
        return ToolCallError(
            ToolCallErrorKind.INVALID_ARGUMENTS,
            f"{tool.name} takes one argument, {arg}: an integer from 1 to {maximum}",
        )
    return value


@dataclass(frozen=True)
class GameSpec:
    """A two-player board game as the full-game env sees it. Moves are integers 1..num_moves."""

    title: str  # "tic-tac-toe"
    tool: ToolSchema
    arg: str  # the tool's argument and the word for a move: "square", "column"
    num_moves: int
    taken: str  # why a legal-range move is refused: "is taken", "is full"
    initial: Board
    legal_moves: Callable[[Board], tuple[int, ...]]
    play: Callable[[Board, int, str], Board]
    winner: Callable[[Board], str | None]
    render: Callable[[Board, str], str]  # (board, env.board_format) -> text
    # The minimax-best moves of the mark to move, for per-move rewards; None: not known.
    best_moves: Callable[[Board, str], tuple[int, ...]] | None = None


def turn_state(board: Board, mark: str) -> str:
    """The name of the state a turn is played in (EnvStep.turn_state): the board and the mark
    to move. Turns of different episodes with the same name share a step-level baseline."""
    return f"{''.join(board)}/{mark}"


def position_prompt(spec: GameSpec, cfg: FullGameConfig, board: Board, player: str,
                    opening: str = "") -> EnvReset:
    """The opening prompt of a full game, for `player` to move on `board` (after `opening`,
    e.g. the opponent's first move): what the agent sees at the start of a game, and what a
    policy opponent (self-play) is asked on every move of its own."""
    system = (f"You play {spec.title} as {player} against an opponent. "
              f"Reply with one {spec.tool.name} tool call per turn.")
    user = f"{opening}{spec.render(board, cfg.board_format)}\nYou are {player}. Your move."
    return EnvReset(messages=(Message("system", system), Message("user", user)),
                    tools=(spec.tool,))


def board_prompt(spec: GameSpec, cfg: FullGameConfig | MoveTaskConfig, board: Board,
                 player: str) -> EnvReset:
    """A turn asked on the board alone (`env.context: board`; only `cfg.board_format` is
    read): for tic-tac-toe the one-move task's own prompt, so that a policy trained on that
    task plays whole games."""
    system = f"You play {spec.title} as {player}. Reply with one {spec.tool.name} tool call."
    user = f"{spec.render(board, cfg.board_format)}\nYou are {player}. Your move."
    return EnvReset(messages=(Message("system", system), Message("user", user)),
                    tools=(spec.tool,))


class GameEnv:
    """A full game against an opponent; implements `arl.protocols.Env`.

    The game's end is rewarded: cfg.reward_win / reward_draw / reward_loss, or
    cfg.reward_invalid when an invalid turn ends the game. Each legal move may also earn a
    per-move reward (cfg.reward_move_best / reward_move_blunder, by the game's minimax value;
    both 0 by default), and every step names the state its turn was played in
    (`turn_state`: board and mark), for turn-level advantages. An invalid turn is
    a ToolCallError, a call that `read_move` refuses, or an illegal move. With
    invalid_action="end" it ends the game; with "retry" the agent may retry that turn
    `max_retries` times, and the next invalid turn ends the game. With cfg.context="board"
    every turn after a move is asked in a new conversation on the current board alone
    (`board_prompt`, via EnvStep.restart); with "game" the replies extend one conversation.
    The seed draws the agent's seat and the opponent's random choices; with
    cfg.opponent_stream="episode" the choices come from the seed and `variant` (the episode's
    index in its group), so the G games of a group differ even where the policy plays alike.

    The final step's `Outcome`: kind and result win | draw | loss | invalid, and the agent's
    moves as its actions.
    """

    def __init__(self, spec: GameSpec, opponent: Opponent, cfg: FullGameConfig,
                 variant: int = 0):
        self.spec = spec
        self._opponent = opponent
        self._cfg = cfg
        self._variant = variant
        self._done: bool | None = None  # None: never reset
        self.board: Board = spec.initial
        self.agent = "X"

    def reset(self, seed: int) -> EnvReset:
        self._rng = random.Random(seed)
        drawn = self._rng.choice(("X", "O"))  # drawn even for a fixed seat: the same stream
        self.agent = drawn if self._cfg.seat == "random" else self._cfg.seat
        if self._cfg.opponent_stream == "episode":  # the seat stays the group's
            self._rng = random.Random(f"{seed}:{self._variant}")
        start = getattr(self._opponent, "reset", None)  # a pool draws this game's opponent
        if start is not None:
            start(self._rng)
        self.board = self.spec.initial
        self._moves: list[int] = []
        self._retries_left = self._cfg.max_retries
        self._done = False
        opening = ""
        if self.agent == "O":
            opening = f"Opponent played {self.spec.arg} {self._opponent_move()}.\n"
        if self._cfg.context == "board":
            return board_prompt(self.spec, self._cfg, self.board, self.agent)
        return position_prompt(self.spec, self._cfg, self.board, self.agent, opening)

    def step(self, turn: ParsedTurn) -> EnvStep:
        if self._done is None:
            raise RuntimeError("step() before reset()")
        if self._done:
            raise RuntimeError("step() after the episode ended; call reset()")
        state = turn_state(self.board, self.agent)
        move = read_move(turn, self.spec.tool, self.spec.arg, self.spec.num_moves)
        if isinstance(move, ToolCallError):
            reason = f"Invalid tool call ({move.kind.value}): {move.message.rstrip('.')}."
            return replace(self._invalid(reason), turn_state=state)
        if move not in self.spec.legal_moves(self.board):
            return replace(self._invalid(f"Illegal move: {self.spec.arg} {move} "
                                         f"{self.spec.taken}."), turn_state=state)
        bonus = self._move_reward(move)
        result = self._play(move)
        return replace(result, reward=result.reward + bonus, turn_state=state)

    def _move_reward(self, move: int) -> float:
        """The per-move reward of a legal move: reward_move_best if it keeps the game's
        minimax value, reward_move_blunder if it gives some up (both 0 by default: then only
        the game's end is rewarded)."""
        cfg = self._cfg  # a TicTacToeConfig where the game knows its minimax-best moves
        if self.spec.best_moves is None or not (cfg.reward_move_best or cfg.reward_move_blunder):
            return 0.0
        best = self.spec.best_moves(self.board, self.agent)
        return cfg.reward_move_best if move in best else cfg.reward_move_blunder

    def _play(self, move: int) -> EnvStep:
        spec = self.spec
        self.board = spec.play(self.board, move, self.agent)
        self._moves.append(move)
        self._retries_left = self._cfg.max_retries  # retries are per turn
        text = f"You played {spec.arg} {move}."
        if spec.winner(self.board) == self.agent:
            return self._finish(text, "win", self._cfg.reward_win)
        if not spec.legal_moves(self.board):
            return self._finish(text, "draw", self._cfg.reward_draw)
        text += f" Opponent played {spec.arg} {self._opponent_move()}."
        if spec.winner(self.board) is not None:
            return self._finish(text, "loss", self._cfg.reward_loss)
        if not spec.legal_moves(self.board):
            return self._finish(text, "draw", self._cfg.reward_draw)
        reply = f"{text}\n{self._render()}\nYour move."
        restart = None
        if self._cfg.context == "board":
            restart = board_prompt(self.spec, self._cfg, self.board, self.agent)
        return EnvStep((Message("tool", reply),), 0.0, False, False, restart=restart)

    def _render(self) -> str:
        return self.spec.render(self.board, self._cfg.board_format)

    def _opponent_move(self) -> int:
        opponent_mark = "O" if self.agent == "X" else "X"
        move = self._opponent.choose(self.board, opponent_mark, self._rng)
        if move not in self.spec.legal_moves(self.board):
            raise RuntimeError(f"opponent {self._opponent!r} chose illegal move {move!r}")
        self.board = self.spec.play(self.board, move, opponent_mark)
        return move

    def _invalid(self, reason: str) -> EnvStep:
        if self._cfg.invalid_action == "retry" and self._retries_left > 0:
            self._retries_left -= 1
            left = self._retries_left
            text = f"{reason} Try again ({left} {'retry' if left == 1 else 'retries'} left)."
            return EnvStep((Message("tool", text),), 0.0, False, False)
        return self._finish(f"{reason} Game over.", "invalid", self._cfg.reward_invalid)

    def _finish(self, text: str, outcome: str, reward: float) -> EnvStep:
        self._done = True
        words = {"win": "You win.", "draw": "Draw.", "loss": "You lose."}
        if outcome != "invalid":
            text = f"{text}\n{self._render()}\n{words[outcome]}"
        final = Outcome(outcome, outcome, tuple(self._moves))
        return EnvStep((Message("tool", text),), float(reward), True, False, final)
