"""The one-move task: one tic-tac-toe move per episode, scored against perfect play.

Board distribution (`opening_board`): from the empty board, play k uniformly random moves with
k uniform in 2..7 (X first), and draw again while the result is won or full, or belongs to
the tenth of symmetry classes held out for evaluation (`rules.held_out`: the positions files
of `arl/envs/tictactoe_positions.py` come from those, so they are boards training never shows).
The agent is whoever is to move, so it plays X on even k and O on odd k. Boards start with at
least `cfg.min_marks` marks (2 by default: on the empty or one-mark board nearly every move is
minimax-best and no move is illegal, so those positions say little about the policy; 0 adds
them for a policy that must also open full games) and at most `cfg.max_marks` (7 by default;
8 adds the last move of a full game, one free square).

Context (`cfg.context`): `board` asks for the move on the board alone; `game` inside the
conversation of the full tictactoe game (envs.game_env) in which the k moves were played, the
agent's as its own tool calls, so that every turn of a full game is a prompt the policy
trained on; `mixed` asks odd seeds in a game and even seeds on the board alone.

Scoring of the single turn (then the episode terminates):
  invalid_call  cfg.reward_invalid  a ToolCallError, another tool, bad or out-of-range arguments
  illegal_move  cfg.reward_invalid  a square that is already taken
  win           cfg.reward_win      a move that wins at once
  best          cfg.reward_best     a minimax-best (value-optimal) move that does not win at once
  legal         cfg.reward_legal    any other empty square
"""

from __future__ import annotations

import random

from arl.envs import tictactoe_rules as rules
from arl.envs.config import MoveTaskConfig, TicTacToeConfig
from arl.envs.game_env import board_prompt, read_move, turn_state
from arl.envs.tictactoe import CHOOSE_SQUARE, SPEC, make_tictactoe
from arl.tools import format_tool_call, parse_tool_call
from arl.types import EnvReset, EnvStep, Message, Outcome, ParsedTurn, ToolCall, ToolCallError

OUTCOMES = ("invalid_call", "illegal_move", "legal", "best", "win")
RESULTS = {"invalid_call": "invalid", "illegal_move": "invalid", "win": "win"}  # else None
MIN_OPENING_MOVES = 2
MAX_OPENING_MOVES = 7
LAST_MOVE_MARKS = 8  # the most marks a board with a move left can have (env.max_marks)


def opening_board(seed: int, min_marks: int = MIN_OPENING_MOVES,
                  max_marks: int = MAX_OPENING_MOVES) -> rules.Board:
    """The episode's board for `seed` (see the module docstring for the distribution)."""
    return replay(opening_moves(seed, min_marks, max_marks))


def opening_moves(seed: int, min_marks: int = MIN_OPENING_MOVES,
                  max_marks: int = MAX_OPENING_MOVES) -> tuple[int, ...]:
    """The squares played, X first, to reach `opening_board(seed, min_marks, max_marks)`."""
    rng = random.Random(seed)
    while True:
        board, moves = rules.EMPTY_BOARD, []
        for _ in range(rng.randint(min_marks, max_marks)):
            if rules.is_terminal(board):
                break
            moves.append(rng.choice(rules.legal_moves(board)))
            board = rules.play(board, moves[-1], rules.to_move(board))
        if not rules.is_terminal(board) and not rules.held_out(board):
            return tuple(moves)


def replay(moves: tuple[int, ...]) -> rules.Board:
    """The board after `moves` (squares 1-9, X first)."""
    board = rules.EMPTY_BOARD
    for move in moves:
        board = rules.play(board, move, rules.to_move(board))
    return board


def game_conversation(moves: tuple[int, ...], board_format: str) -> EnvReset:
    """The full tictactoe game's conversation (envs.game_env: its prompt, the agent's calls,
    the env's replies) in which `moves` were played, up to the agent's next turn: the agent
    plays every other move so that it is to move after the last one."""
    seat = rules.to_move(replay(moves))
    mine = moves[seat == "O"::2]  # X plays moves 0, 2, ...; O plays 1, 3, ...
    theirs = iter(moves[seat == "X"::2])
    game = make_tictactoe(TicTacToeConfig(name="tictactoe", seat=seat,
                                          board_format=board_format),
                          opponent=_Replay(theirs))
    reset = game.reset(0)
    messages = list(reset.messages)
    for square in mine:
        call = format_tool_call(ToolCall(CHOOSE_SQUARE.name, {"square": square}))
        step = game.step(parse_tool_call(call, reset.tools))
        messages += [Message("assistant", call), *step.messages]
    return EnvReset(messages=tuple(messages), tools=reset.tools)


class _Replay:
    """An opponent that plays the given squares in turn."""

    def __init__(self, squares):
        self._squares = squares

    def choose(self, board: rules.Board, mark: str, rng: random.Random) -> int:
        return next(self._squares)


def move_outcome(board: rules.Board, agent: str, square: int) -> str:
    """"illegal_move" | "win" | "best" | "legal" for `agent` (to move) naming `square` (1-9)."""
    if square not in rules.legal_moves(board):
        return "illegal_move"
    if square in rules.winning_moves(board, agent):
        return "win"
    if square in rules.best_moves(board, agent):
        return "best"
    return "legal"


def outcome_reward(outcome: str, cfg: MoveTaskConfig) -> float:
    """The reward-table entry of an outcome (see the module docstring)."""
    return float({
        "invalid_call": cfg.reward_invalid,
        "illegal_move": cfg.reward_invalid,
        "legal": cfg.reward_legal,
        "best": cfg.reward_best,
        "win": cfg.reward_win,
    }[outcome])


class TicTacToeMoveEnv:
    """One scored move on a random mid-game board; implements `arl.protocols.Env`.

    The step's `Outcome`: kind invalid_call | illegal_move | legal | best | win (OUTCOMES),
    result invalid for the first two and win for a win, and the square named as its action
    (none for an invalid call).
    """

    def __init__(self, cfg: MoveTaskConfig, variant: int = 0):
        """`variant`: with `cfg.group_symmetries`, which of the board's 8 symmetries this
        env shows (the episode's index in its group); ignored otherwise."""
        self._cfg = cfg
        self._symmetry = rules.SYMMETRIES[variant % 8] if cfg.group_symmetries else None
        self._done: bool | None = None  # None: never reset
        self.board: rules.Board = rules.EMPTY_BOARD
        self.agent = "X"

    def reset(self, seed: int) -> EnvReset:
        moves = opening_moves(seed, self._cfg.min_marks, self._cfg.max_marks)
        if self._symmetry is not None:  # shown[j] = board[perm[j]]: square i + 1 moves to j
            where = {i: j for j, i in enumerate(self._symmetry)}
            moves = tuple(where[m - 1] + 1 for m in moves)
        reset = self._start(replay(moves), None)  # the board and agent, in either context
        context = self._cfg.context
        if context == "game" or (context == "mixed" and seed % 2):
            return game_conversation(moves, self._cfg.board_format)
        return reset

    def _start(self, board: rules.Board, agent: str | None) -> EnvReset:
        self.board = board
        self.agent = agent or rules.to_move(board)
        self._done = False
        return board_prompt(SPEC, self._cfg, self.board, self.agent)

    def step(self, turn: ParsedTurn) -> EnvStep:
        if self._done is None:
            raise RuntimeError("step() before reset()")
        if self._done:
            raise RuntimeError("step() after the episode ended; call reset()")
        self._done = True
        outcome, square, text = self._score(turn)
        reward = outcome_reward(outcome, self._cfg)
        result = RESULTS.get(outcome)
        final = Outcome(outcome, result, () if square is None else (square,))
        return EnvStep((Message("tool", text),), reward, True, False, final,
                       turn_state=turn_state(self.board, self.agent))

    def _score(self, turn: ParsedTurn) -> tuple[str, int | None, str]:
        """(outcome, square, reply text) of the turn on the current board."""
        move = read_move(turn, CHOOSE_SQUARE, "square", 9)
        if isinstance(move, ToolCallError):
            text = f"Invalid tool call ({move.kind.value}): {move.message.rstrip('.')}."
            return "invalid_call", None, text
        outcome = move_outcome(self.board, self.agent, move)
        text = {
            "illegal_move": f"Illegal move: square {move} is taken.",
            "win": f"You played square {move}: a winning move.",
            "best": f"You played square {move}: a best move.",
            "legal": f"You played square {move}: legal, but not the best.",
        }[outcome]
        return outcome, move, text


class PositionEnv(TicTacToeMoveEnv):
    """TicTacToeMoveEnv on one given position instead of a random one (for evaluation):
    every reset starts from `board` with `agent` to move; the seed is ignored."""

    def __init__(self, cfg: MoveTaskConfig, board: rules.Board, agent: str):
        if len(board) != 9 or set(board) - {*rules.MARKS, rules.EMPTY} or agent not in rules.MARKS:
            raise ValueError(f"not a tic-tac-toe position: {board!r} with {agent!r} to move")
        if rules.is_terminal(board):
            raise ValueError(f"position {''.join(board)!r} is already over")
        super().__init__(cfg)
        self._position = (tuple(board), agent)

    def reset(self, seed: int) -> EnvReset:
        return self._start(*self._position)


def position_env(cfg: MoveTaskConfig, row: dict) -> tuple[PositionEnv, tuple[int, ...]]:
    """The env of one positions-file row, and its good moves. A row is
    `{"board": "X.O......", "to_move": "X", "good_moves": [3, 5]}`: 9 cells row by row (`X`,
    `O`, `.` for empty), squares numbered 1-9 row by row, every good move an empty square.
    Raises ValueError (KeyError, TypeError) for a malformed row."""
    board, to_move, good = row["board"], row["to_move"], row["good_moves"]
    if not isinstance(board, str) or len(board) != 9 or set(board) - set("XO."):
        raise ValueError(f"board must be 9 of X, O, '.'; got {board!r}")
    if to_move not in ("X", "O"):
        raise ValueError(f"to_move must be X or O; got {to_move!r}")
    if (not isinstance(good, list) or not good
            or not all(type(m) is int and 1 <= m <= 9 for m in good)):
        raise ValueError(f"good_moves must be a non-empty list of squares 1-9; got {good!r}")
    taken = [m for m in good if board[m - 1] != "."]
    if taken:
        raise ValueError(f"good_moves {taken} are not empty squares of {board!r}")
    return PositionEnv(cfg, tuple(board), to_move), tuple(good)
