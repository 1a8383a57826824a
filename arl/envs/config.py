"""The `env.*` keys of arl's own games: one config type per env (`EnvSpec.config`).

Each is an `arl.config.EnvConfig` subclass, so `arl config show` prints its keys with their
help and `arl.config.load_config` refuses keys another game would take.
"""

from __future__ import annotations

from dataclasses import dataclass

from arl.config import EnvConfig
from arl.schema import opt

BOARD_FORMAT_HELP = ("boards as text: lists (X: 1 5 / O: 3 / free: ...) or grid (X|2|O "
                     "rows)")
OPPONENTS = ("random", "minimax", "eps_minimax", "policy", "pool")
OPPONENT_STREAMS = ("group", "episode")  # whose random stream an opponent draws from


@dataclass
class MoveTaskConfig(EnvConfig):
    """tictactoe_move: one scored move on a mid-game board."""

    reward_invalid: float = opt(-1.0, "a missing, malformed or illegal call")
    reward_legal: float = opt(0.0, "a legal move that is not best")
    reward_best: float = opt(0.8, "a minimax-best move")
    reward_win: float = opt(1.0, "a move that wins at once")
    group_symmetries: bool = opt(False, "the G episodes of a group play its board in turn in "
                                 "each of the 8 symmetries: a policy that plays one square "
                                 "whatever the board shows gets different rewards within the "
                                 "group, so it still learns")
    board_format: str = opt("lists", BOARD_FORMAT_HELP, choices=("lists", "grid"))
    context: str = opt("board", "what the move is asked in: board (the board alone), game "
                       "(the full game's conversation that led to it, so that the policy "
                       "also plays full games) or mixed (every other start state)",
                       choices=("board", "game", "mixed"))
    min_marks: int = opt(2, "fewest marks on a start board (0-max_marks); 0 and 1 reach the first "
                         "moves of a full game", check="non_negative")
    max_marks: int = opt(7, "most marks on a start board (min_marks-8); 8 reaches the last "
                         "move of a full game", check="non_negative")


@dataclass
class FullGameConfig(EnvConfig):
    """The keys every full two-player game of arl's takes."""

    reward_invalid: float = opt(-1.0, "a missing, malformed or illegal call that ends the game")
    reward_win: float = opt(1.0, "a won game")
    reward_draw: float = opt(0.0, "a drawn game")
    reward_loss: float = opt(-1.0, "a lost game")
    opponent: str = opt("eps_minimax", "who the games are played against; policy: a frozen "
                        "snapshot of the policy (self-play); pool: one of opponent_pool per "
                        "game", choices=OPPONENTS)
    opponent_pool: list[str] = opt(["random", "eps_minimax:0.3", "minimax"], "opponent=pool: the "
                                   "opponents a game may meet: random | minimax | policy | "
                                   "eps_minimax:<p>")
    epsilon_start: float = opt(-1.0, "eps_minimax curriculum: the opponent's epsilon at step "
                               "0, falling linearly to opponent_epsilon over "
                               "epsilon_decay_steps; < 0: off")
    epsilon_decay_steps: int = opt(0, "steps of the epsilon curriculum", check="non_negative")
    opponent_epsilon: float = opt(0.3, "eps_minimax: the chance of a random move",
                                  check="fraction")
    opponent_stream: str = opt("group", "the opponent's random choices: group (the G games "
                               "of a group meet one stream, so alike play meets alike "
                               "replies) or episode (a stream per game, so a group's games "
                               "differ where the policy plays alike)",
                               choices=OPPONENT_STREAMS)
    context: str = opt("game", "what each turn is asked in: game (the conversation so far, "
                       "extended by the env's replies) or board (a new conversation on the "
                       "current board alone, as the one-move task asks it; each turn its "
                       "own training row)", choices=("game", "board"))
    opponent_refresh_every: int = opt(10, "opponent=policy: steps between refreshes of the "
                                      "frozen snapshot of the policy that plays the opponent",
                                      check="positive")
    invalid_action: str = opt("end", "an invalid turn ends the game (end) or may be retried",
                              choices=("end", "retry"))
    max_retries: int = opt(2, "invalid_action=retry: retries per turn before the game ends",
                           check="non_negative")
    seat: str = opt("random", "the agent's mark (X moves first); random: drawn from the "
                    "episode seed", choices=("random", "X", "O"))
    board_format: str = opt("lists", BOARD_FORMAT_HELP, choices=("lists", "grid"))


@dataclass
class TicTacToeConfig(FullGameConfig):
    """tictactoe: full games from the empty board."""

    reward_move_best: float = opt(0.0, "added to each turn whose move keeps the game's "
                                  "minimax value")
    reward_move_blunder: float = opt(0.0, "added to each turn whose move gives some of the "
                                     "game's minimax value up")


@dataclass
class ConnectFourConfig(FullGameConfig):
    """connect_four: 6 x 7 connect four."""

    search_depth: int = opt(4, "the minimax opponent's search depth", check="positive")
    board_format: str = opt("grid", "boards as text: grid (rows of cells over the column "
                            "numbers), connect four's one style", choices=("grid",))
