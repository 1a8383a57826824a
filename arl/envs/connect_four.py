"""Connect four (6 rows x 7 columns), a full game against an opponent (see
`envs.game_env.GameEnv` for the contract).

The tool is `drop_piece(column: 1-7)`; the rendered board lists the column numbers under the
bottom row. The minimax opponent searches `cfg.search_depth` plies with alpha-beta.
"""

from __future__ import annotations

from arl.envs import connect_four_rules as rules
from arl.envs.config import ConnectFourConfig
from arl.envs.game_env import GameEnv, GameSpec, move_tool
from arl.envs.opponents import Opponent, opponent_for

DROP_PIECE = move_tool(
    name="drop_piece",
    arg="column",
    maximum=7,
    description="Drop your piece into a column of the connect-four board; it falls to the "
    "lowest empty cell.",
    arg_help="Column number 1-7, from the left.",
)

SPEC = GameSpec(
    title="connect four",
    tool=DROP_PIECE,
    arg="column",
    num_moves=7,
    taken="is full",
    initial=rules.EMPTY_BOARD,
    legal_moves=rules.legal_moves,
    play=rules.play,
    winner=rules.winner,
    render=rules.render,
)


def make_connect_four(cfg: ConnectFourConfig, opponent: Opponent | None = None,
                     variant: int = 0) -> GameEnv:
    """A connect-four env; `opponent` overrides the one `cfg.opponent` names; `variant` is the
    episode's index in its group (see GameEnv)."""
    return GameEnv(SPEC, opponent_for(cfg, "connect_four", opponent), cfg, variant)
