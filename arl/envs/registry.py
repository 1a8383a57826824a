"""arl's own envs as `EnvSpec`s. pyproject.toml registers each under the `arl.envs` entry
point group, the way any installed package registers its envs; `default` is the demo's.

Each spec's `check` holds the config rules that tie the game's keys to each other or to
other sections (run by `arl.config.load_config`, before Ray starts).
"""

from __future__ import annotations

import dataclasses
import functools

from arl.config import Config, ConfigError
from arl.env_spec import EnvContext, EnvSpec, SelfPlay, resolve_env
from arl.envs.config import ConnectFourConfig, FullGameConfig, MoveTaskConfig, TicTacToeConfig
from arl.envs.connect_four import SPEC as CONNECT_FOUR_RULES
from arl.envs.connect_four import make_connect_four
from arl.envs.game_env import GameSpec, board_prompt, position_prompt
from arl.envs.opponents import PolicyOpponent, opponent_schedule, parse_opponent
from arl.envs.reference_players import reference_call
from arl.envs.tictactoe import SPEC as TICTACTOE_RULES
from arl.envs.tictactoe import make_tictactoe
from arl.envs.tictactoe_move import LAST_MOVE_MARKS, TicTacToeMoveEnv, position_env
from arl.envs.tictactoe_move import OUTCOMES as MOVE_OUTCOMES
from arl.protocols import Env
from arl.types import ToolCall

GAME_OUTCOMES = ("win", "draw", "loss", "invalid")
GAME_RULES = {"tictactoe": TICTACTOE_RULES, "connect_four": CONNECT_FOUR_RULES}


def game_spec(name: str) -> GameSpec:
    """The rules of the full-game env `name` (tictactoe | connect_four)."""
    if name not in GAME_RULES:
        raise ValueError(f"{name!r} is not a full-game env; choose from {sorted(GAME_RULES)}")
    return GAME_RULES[name]


def _check_full_game(env: FullGameConfig, cfg: Config) -> None:
    for i, member in enumerate(env.opponent_pool):
        if member != "policy":
            try:
                parse_opponent(member)
            except ValueError:
                raise ConfigError(f"env.opponent_pool.{i}", f"{member!r}: must be random, "
                                  "minimax, policy or eps_minimax:<p> with 0 <= p <= 1") from None
    if env.epsilon_start > 1:
        raise ConfigError("env.epsilon_start", "must be in [0, 1] (or < 0: off)")


def _check_tictactoe(env: TicTacToeConfig, cfg: Config) -> None:
    """_check_full_game, and per-move penalties must leave an invalid call the worst
    episode: where one blunder and a loss cost more than an invalid call, ending the game
    at once is the cheapest way out, and a run learns exactly that (measured: all calls
    invalid within 6 steps)."""
    _check_full_game(env, cfg)
    blunder = env.reward_move_blunder
    played = env.reward_loss + blunder  # a lost game with one blunder
    quits = env.invalid_action == "end"  # with retries an invalid call does not end the game
    if quits and blunder < 0 and env.reward_invalid >= played:
        raise ConfigError("env.reward_invalid", f"{env.reward_invalid} does not cost more than "
                          f"a lost game with one blunder ({played}): set it below that, or "
                          "make env.reward_move_blunder or env.reward_loss milder")


def _self_play(name: str):
    """self_play of a full game: where a snapshot of the policy is an opponent, it is asked
    what the agent is asked at the start of a game, for its own mark on the current board
    (`position_prompt`), and picks among the calls of the legal moves."""
    def self_play(env: FullGameConfig) -> SelfPlay | None:
        if not (env.opponent == "policy" or (env.opponent == "pool"
                                             and "policy" in env.opponent_pool)):
            return None
        return SelfPlay(functools.partial(board_policy, GAME_RULES[name], env),
                        env.opponent_refresh_every)
    return self_play


def board_policy(rules: GameSpec, env: FullGameConfig, choose) -> PolicyOpponent:
    """A full game's opponent that plays `choose`'s pick (see arl.env_spec.SelfPlay)."""
    def move(board, player, rng) -> int:
        legal = rules.legal_moves(board)
        calls = [ToolCall(rules.tool.name, {rules.arg: m}) for m in legal]
        ask = board_prompt if env.context == "board" else position_prompt
        return legal[choose(ask(rules, env, board, player), calls, rng)]
    return PolicyOpponent(move, rules.legal_moves)


def _game_against(name: str):
    """eval_game of a full game: the same game and board format, the given opponent."""
    def eval_game(env: FullGameConfig, opponent: str, seat: str) -> tuple[str, FullGameConfig]:
        choice = parse_opponent(opponent)
        return name, dataclasses.replace(env, name=name, opponent=choice.name,
                                         opponent_epsilon=choice.epsilon, seat=seat)
    return eval_game


def _check_move_task(env: MoveTaskConfig, cfg: Config) -> None:
    if env.max_marks > LAST_MOVE_MARKS:
        raise ConfigError("env.max_marks", f"{env.max_marks}: must be at most "
                          f"{LAST_MOVE_MARKS} (a board with more marks is full)")
    if env.min_marks > env.max_marks:
        raise ConfigError("env.min_marks", f"{env.min_marks}: must be at most env.max_marks "
                          f"({env.max_marks})")


def _move_task_game(env: MoveTaskConfig, opponent: str, seat: str) -> tuple[str, FullGameConfig]:
    """The one-move task is evaluated in full tic-tac-toe games with its board format, each
    turn asked as the task asks it: on the board alone (context board), else in the game's
    conversation."""
    game = TicTacToeConfig(name="tictactoe", board_format=env.board_format,
                           reward_invalid=env.reward_invalid, reward_win=env.reward_win,
                           context="board" if env.context == "board" else "game")
    return _game_against("tictactoe")(game, opponent, seat)


def _position_of(env: MoveTaskConfig | TicTacToeConfig, row: dict) -> tuple[Env, tuple[int, ...]]:
    """Positions are one-move tic-tac-toe tasks in the run's board format."""
    task = MoveTaskConfig(name="tictactoe_move", board_format=env.board_format,
                          reward_invalid=env.reward_invalid)
    return position_env(task, row)


TICTACTOE_MOVE = EnvSpec(
    name="tictactoe_move",
    factory=lambda cfg, ctx: TicTacToeMoveEnv(cfg, ctx.variant),
    config=MoveTaskConfig,
    outcomes=MOVE_OUTCOMES,
    max_turns=1,
    eval_game=_move_task_game,
    position=_position_of,
    check=_check_move_task,
    reference=reference_call,
)


def _full_game(name: str, make, config: type, max_turns: int, check, **hooks) -> EnvSpec:
    """The spec of one of arl's full games: its opponents (self-play included), the epsilon
    curriculum and evaluation games come with every one."""
    return EnvSpec(name=name, factory=lambda cfg, ctx: make(cfg, ctx.opponent, ctx.variant),
                   config=config,
                   outcomes=GAME_OUTCOMES, max_turns=max_turns, check=check,
                   self_play=_self_play(name), schedule=opponent_schedule,
                   eval_game=_game_against(name), reference=reference_call, **hooks)


TICTACTOE = _full_game("tictactoe", make_tictactoe, TicTacToeConfig, 9, _check_tictactoe,
                       position=_position_of)
CONNECT_FOUR = _full_game("connect_four", make_connect_four, ConnectFourConfig, 24,
                          _check_full_game)


def env_config(name: str = "tictactoe_move", **values: object):
    """The config of arl's env `name` with `values` set, the rest at their defaults."""
    spec = {s.name: s for s in (TICTACTOE_MOVE, TICTACTOE, CONNECT_FOUR)}[name]
    return spec.config(name=name, **values)


def make_env(cfg, opponent=None, variant: int = 0) -> Env:
    """An env of any registered spec for `cfg` (by `cfg.name`), with an optional
    `opponent` (self-play) and the episode's `variant` (see `arl.env_spec.EnvContext`)."""
    return resolve_env(cfg.name).make(cfg, EnvContext(variant, opponent))
