"""TextArena games as arl envs (the `textarena` extra: `pip install -e '.[textarena]'`).

`env.game` is a TextArena env id (`TicTacToe-v0-raw`, `ConnectFour-v0-raw`,
`GuessTheNumber-v0-raw`, ...; `-raw` ids carry no wrappers). The agent plays one seat; its
move is one `play(move)` tool call whose `move` string goes to TextArena unchanged (e.g.
`[4]`, `[col 3]`), and the conversation is TextArena's own observations. TextArena judges
every move: an invalid one gets its own "invalid move" message and, within the game's error
allowance, another try; a call that does not parse is handed to TextArena as an empty move,
so both kinds of invalid turn follow the game's rules, and the error observation says what
was wrong with the call.

Opponents (`env.opponent`, two-player games): random (a uniformly random legal move) and
minimax (perfect play; TicTacToe only, by arl's own tic-tac-toe rules), for the games whose
legal moves arl can read from TextArena's state (`LEGAL_MOVES`); policy: a frozen snapshot
of the policy (self-play), asked with the opponent's own observations so far and picking
among the calls of the legal moves; or agent: any TextArena
agent (a callable from the observation text to the move, such as `textarena.agents`' API
agents), built by the zero-argument factory `env.opponent_agent` names (`package.module:attr`).
Single-player games (`env.num_players: 1`) have none.

Reward: the agent's TextArena reward times `env.reward_scale`, or `env.reward_invalid` when
its invalid move ended the game; Outcome win | draw | loss | invalid.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from arl.config import ConfigError, EnvConfig
from arl.env_spec import EnvSpec, SelfPlay
from arl.envs import tictactoe_rules
from arl.schema import opt
from arl.types import EnvReset, EnvStep, Message, Outcome, ParsedTurn, ToolCall, ToolSchema

OUTCOMES = ("win", "draw", "loss", "invalid")
PLAY = ToolSchema(
    name="play",
    description="Make your move in the game.",
    parameters={"type": "object",
                "properties": {"move": {"type": "string",
                                        "description": "your move, written as the game's "
                                        "rules ask (e.g. [4])"}},
                "required": ["move"], "additionalProperties": False},
)


@dataclass
class TextArenaConfig(EnvConfig):
    game: str = opt("TicTacToe-v0-raw", "a TextArena env id (textarena.make)")
    num_players: int = opt(2, "players of the game: 2 (the agent and an opponent) or 1",
                           check="positive")
    opponent: str = opt("random", "two-player games: random, minimax (TicTacToe), policy (a "
                        "frozen snapshot of the policy) or agent",
                        choices=("random", "minimax", "policy", "agent"))
    opponent_refresh_every: int = opt(10, "opponent=policy: steps between refreshes of the "
                                      "snapshot", check="positive")
    opponent_agent: str = opt("", "opponent=agent: package.module:attr, a zero-argument "
                              "factory of a TextArena agent (observation text -> move)",
                              code=True)
    seat: str = opt("random", "the agent's player id; random: drawn from the episode seed",
                    choices=("random", "0", "1"))
    reward_scale: float = opt(1.0, "the episode reward is the agent's TextArena reward times "
                              "this")
    reward_invalid: float = opt(-1.0, "the agent's invalid moves ended the game")
    max_steps: int = opt(64, "moves of both players before the game is cut off",
                         check="positive")


def _tictactoe_cells(state: Any) -> tuple[str, ...]:
    return tuple(cell or "." for row in state.game_state["board"] for cell in row)


def _tictactoe_moves(state: Any) -> list[str]:
    return [f"[{i}]" for i, cell in enumerate(_tictactoe_cells(state)) if cell == "."]


def _connect_four_moves(state: Any) -> list[str]:
    top = state.game_state["board"][0]
    return [f"[col {c}]" for c, cell in enumerate(top) if cell == "."]


def _tictactoe_best(state: Any, mark: str) -> list[str]:
    board = _tictactoe_cells(state)
    return [f"[{square - 1}]" for square in tictactoe_rules.best_moves(board, mark)]


# TextArena id prefix -> the legal moves of the player to move, as TextArena spells them
LEGAL_MOVES: dict[str, Callable[[Any], list[str]]] = {
    "TicTacToe-": _tictactoe_moves, "ConnectFour-": _connect_four_moves}
BEST_MOVES: dict[str, Callable[[Any, str], list[str]]] = {"TicTacToe-": _tictactoe_best}


def _table(table: dict[str, Any], game: str) -> Any:
    return next((v for prefix, v in table.items() if game.startswith(prefix)), None)


def make_game(game: str) -> Any:
    """A TextArena env; ImportError naming the extra when TextArena is not installed."""
    try:
        import textarena
    except ImportError:
        raise ImportError("TextArena is not installed: pip install -e '.[textarena]'") from None
    return textarena.make(game)


def load_agent(name: str) -> Callable[[], Any]:
    """The agent factory `package.module:attr` names (ValueError if it names none)."""
    import importlib

    module, _, attr = name.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError):
        raise ValueError(f"env.opponent_agent {name!r} names no importable "
                         "package.module:attr") from None


def _core(env: Any) -> Any:
    while hasattr(env, "env"):  # through TextArena's wrappers to the game
        env = env.env
    return env


class TextArenaEnv:
    """One TextArena game from one seat; implements `arl.protocols.Env`."""

    def __init__(self, cfg: TextArenaConfig, policy: Callable[..., int] | None = None):
        """`policy`: with opponent=policy, the snapshot's chooser (arl.env_spec.SelfPlay)."""
        if cfg.opponent == "policy" and policy is None:
            raise ValueError("opponent 'policy' needs the snapshot's chooser (self-play)")
        self.cfg, self._policy = cfg, policy
        self._legal = _table(LEGAL_MOVES, cfg.game)
        self._best = _table(BEST_MOVES, cfg.game)
        self._agent = load_agent(cfg.opponent_agent)() if cfg.opponent == "agent" else None
        self._done: bool | None = None

    def reset(self, seed: int) -> EnvReset:
        self._rng = random.Random(seed)
        drawn = self._rng.choice((0, 1))  # drawn even for a fixed seat: the same stream
        two = self.cfg.num_players == 2
        self.agent = (drawn if self.cfg.seat == "random" else int(self.cfg.seat)) if two else 0
        self.env = make_game(self.cfg.game)
        self.env.reset(num_players=self.cfg.num_players, seed=seed)
        self._steps, self._done = 0, False
        self._seen: list[str] = []  # the opponent's observations so far (self-play prompts)
        self._opponent_turns()  # the opponent may open
        return self._prompt(self.agent, self._observe())

    def step(self, turn: ParsedTurn) -> EnvStep:
        if self._done is None or self._done:
            raise RuntimeError("step() before reset() or after the episode ended")
        if isinstance(turn, ToolCall) and turn.name == PLAY.name and \
                isinstance(turn.arguments.get("move"), str) and set(turn.arguments) == {"move"}:
            move, note = turn.arguments["move"], ""
        else:  # TextArena's invalid-move rules judge it, as an empty move
            why = turn.message if not isinstance(turn, ToolCall) else \
                f"call {PLAY.name} with one string argument, move"
            move, note = "", f"Invalid tool call: {why.rstrip('.')}.\n"
        over = self._send(move) or self._opponent_turns()
        text = note + self._observe()
        if over or self._steps >= self.cfg.max_steps:
            return self._end(text)
        return EnvStep((Message("tool", text),), 0.0, False, False)

    def _send(self, move: str) -> bool:
        self._steps += 1
        done, _ = self.env.step(action=move)
        return bool(done)

    def _opponent_turns(self) -> bool:
        """Play the opponent until the agent is to move; whether the game ended."""
        core = _core(self.env)
        while core.state.current_player_id != self.agent and self._steps < self.cfg.max_steps:
            _, seen = self.env.get_observation()  # the opponent's view, not the agent's
            self._seen += [text for _, text, *_ in seen]
            if self._send(self._opponent_move(core.state, seen)):
                return True
        return False

    def _opponent_move(self, state: Any, seen: list) -> str:
        if self._agent is not None:
            return str(self._agent("\n".join(text for _, text, *_ in seen)))
        if self._legal is None:
            raise RuntimeError(f"arl cannot read the legal moves of {self.cfg.game}")
        if self._policy is not None:
            return self._snapshot_move(state)
        mark = "X" if state.current_player_id == 1 else "O"  # TextArena's TicTacToe marks
        if self.cfg.opponent == "minimax" and self._best is not None:
            return self._rng.choice(self._best(state, mark))
        return self._rng.choice(self._legal(state))

    def _snapshot_move(self, state: Any) -> str:
        """The snapshot's pick among the legal moves, asked as the agent is asked."""
        prompt = self._prompt(state.current_player_id, "\n".join(self._seen))
        moves = self._legal(state)
        calls = [ToolCall(PLAY.name, {"move": m}) for m in moves]
        return moves[self._policy(prompt, calls, self._rng)]

    def _prompt(self, player: int, seen: str) -> EnvReset:
        """The opening of a game for `player`, who has seen `seen` so far."""
        system = (f"You play {self.cfg.game.split('-')[0]} as player {player}. Reply with one "
                  f"{PLAY.name} tool call per turn.")
        return EnvReset((Message("system", system), Message("user", seen)), (PLAY,))

    def _observe(self) -> str:
        """The agent's new observations, as TextArena wrote them (its own moves left out)."""
        _, messages = self.env.get_observation()
        lines = [text for sender, text, *_ in messages
                 if not (sender == self.agent and text.startswith("["))]
        return "\n".join(line.rstrip() for line in lines) or "Your move."

    def _end(self, text: str) -> EnvStep:
        self._done = True
        rewards, info = self.env.close()
        mine = info.get(self.agent, {}) if isinstance(info, dict) else {}
        value = float((rewards or {}).get(self.agent, 0.0))
        if mine.get("invalid_move"):
            kind, reward = "invalid", self.cfg.reward_invalid
        else:
            kind = "win" if value > 0 else "loss" if value < 0 else "draw"
            reward = value * self.cfg.reward_scale
        return EnvStep((Message("tool", text),), float(reward), True, False,
                       Outcome(kind, kind, ()))


def _check(env: TextArenaConfig, cfg: Any) -> None:
    try:
        import textarena
    except ImportError:
        raise ConfigError("env.name", "TextArena is not installed: pip install -e "
                          "'.[textarena]'") from None
    if env.game not in textarena.envs.registration.ENV_REGISTRY:
        raise ConfigError("env.game", f"TextArena has no env {env.game!r}")
    if env.num_players not in (1, 2):
        raise ConfigError("env.num_players", "must be 1 or 2")
    if env.opponent == "agent":
        try:
            load_agent(env.opponent_agent)
        except ValueError as err:
            raise ConfigError("env.opponent_agent", str(err)) from None
    elif env.num_players == 2 and _table(LEGAL_MOVES, env.game) is None:
        raise ConfigError("env.game", f"arl has no opponent for {env.game!r}: its legal moves "
                          f"are read for {sorted(LEGAL_MOVES)} only")
    if env.opponent == "minimax" and _table(BEST_MOVES, env.game) is None:
        raise ConfigError("env.opponent", f"no minimax opponent for {env.game!r}")


def _self_play(env: TextArenaConfig) -> SelfPlay | None:
    """The snapshot's chooser is the env's opponent as it is (see TextArenaEnv)."""
    return SelfPlay(lambda choose: choose, env.opponent_refresh_every) \
        if env.opponent == "policy" else None


def _eval_game(env: TextArenaConfig, opponent: str, seat: str) -> tuple[str, TextArenaConfig]:
    if env.num_players != 2:
        raise ValueError(f"{env.game} is a one-player game: set eval.opponents=[]")
    if opponent not in ("random", "minimax", "agent"):
        raise ValueError(f"opponent must be random, minimax or agent for TextArena; got "
                         f"{opponent!r}")
    seat_id = {"X": "0", "O": "1"}.get(seat, seat)
    return env.name, dataclasses.replace(env, opponent=opponent, seat=seat_id)


SPEC = EnvSpec(
    name="textarena",
    factory=lambda cfg, ctx: TextArenaEnv(cfg, ctx.opponent),
    config=TextArenaConfig,
    outcomes=OUTCOMES,
    max_turns=64,
    check=_check,
    eval_game=_eval_game,
    self_play=_self_play,
)
