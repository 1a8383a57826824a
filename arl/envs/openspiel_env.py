"""OpenSpiel games as arl envs (the `openspiel` extra: `pip install -e '.[openspiel]'`).

Any two-player, turn-based OpenSpiel game (`env.game`, an OpenSpiel game string such as
`connect_four`, `kuhn_poker`, `tic_tac_toe`, `breakthrough(rows=5,columns=5)`) is played
from the agent's seat against one of OpenSpiel's bots. The prompt shows what the agent may
know (the information state where the game has one, else its observation, else the state)
and the legal actions, numbered 1..k; the move is one call of a tool with one integer
argument (`env.tool_name`, `env.tool_arg`: name them as a warm-started model's calls are
named to reuse its format). Chance nodes are sampled from the episode seed, and every bot is
seeded from it too: the same seed and the same agent moves give the same game. With
`env.opponent_stream: episode` the bot's seed comes from the seed and the episode's index in
its group instead: a group's hands keep one deal and one seat but meet the bot's random
choices independently, so comparing them within the group weighs each move by what it earns
against the bot's whole policy, not against one draw of it.

Bots (`env.opponent`): random (`pyspiel.make_uniform_random_bot`), mcts (OpenSpiel's
MCTSBot with random rollouts, `env.mcts_simulations`; it searches the true state, so in
imperfect-information games it sees hidden cards), alpha_beta (depth-limited alpha-beta
search, `env.search_depth`; deterministic perfect-information zero-sum games only, unsearched
leaves valued 0).

The episode's reward is the agent's return times `env.reward_scale` (an invalid or illegal
call ends the game with `env.reward_invalid`); its Outcome is win | draw | loss by the sign
of the return, or invalid.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from arl.config import ConfigError, EnvConfig
from arl.env_spec import EnvSpec
from arl.envs.config import OPPONENT_STREAMS
from arl.envs.game_env import move_tool, read_move
from arl.schema import opt
from arl.types import EnvReset, EnvStep, Message, Outcome, ParsedTurn, ToolCall, ToolCallError

BOTS = ("random", "mcts", "alpha_beta")
OUTCOMES = ("win", "draw", "loss", "invalid")


@dataclass
class OpenSpielConfig(EnvConfig):
    game: str = opt("connect_four", "an OpenSpiel game string (pyspiel.load_game)")
    opponent: str = opt("random", "the OpenSpiel bot the agent plays", choices=BOTS)
    seat: str = opt("random", "the agent's player id (0 moves first); random: drawn from the "
                    "episode seed", choices=("random", "0", "1"))
    mcts_simulations: int = opt(100, "opponent=mcts: simulations per move", check="positive")
    search_depth: int = opt(4, "opponent=alpha_beta: plies searched", check="positive")
    reward_scale: float = opt(1.0, "the episode reward is the agent's return times this")
    reward_invalid: float = opt(-1.0, "a missing, malformed or illegal call (ends the game)")
    tool_name: str = opt("play", "the move tool's name")
    tool_arg: str = opt("action", "its one integer argument: the number of a legal action")
    opponent_stream: str = opt("group", "the bot's random choices: group (the G games of a "
                               "group meet one bot seed, so alike play meets alike replies) "
                               "or episode (a bot seed per game; the deal and the seat stay "
                               "the group's)", choices=OPPONENT_STREAMS)


def load_game(name: str) -> Any:
    """The pyspiel game; ImportError naming the extra when OpenSpiel is not installed."""
    try:
        import pyspiel
    except ImportError:
        raise ImportError("OpenSpiel is not installed: pip install -e '.[openspiel]'") from None
    return pyspiel.load_game(name)


def _bot(game: Any, cfg: OpenSpielConfig, player: int, seed: int) -> Any:
    import pyspiel

    if cfg.opponent == "random":
        return pyspiel.make_uniform_random_bot(player, seed)
    if cfg.opponent == "mcts":
        from open_spiel.python.algorithms import mcts

        rollouts = mcts.RandomRolloutEvaluator(1, np.random.RandomState(seed))
        return mcts.MCTSBot(game, 2.0, cfg.mcts_simulations, rollouts,
                            random_state=np.random.RandomState(seed + 1))
    return _AlphaBetaBot(game, cfg.search_depth)


class _AlphaBetaBot:
    """Depth-limited alpha-beta (OpenSpiel's `minimax.alpha_beta_search`) as a bot."""

    def __init__(self, game: Any, depth: int):
        self.game, self.depth = game, depth

    def step(self, state: Any) -> int:
        from open_spiel.python.algorithms import minimax

        _, action = minimax.alpha_beta_search(self.game, state, lambda s: 0.0, self.depth,
                                              state.current_player())
        return int(action)


class OpenSpielEnv:
    """One OpenSpiel game against a bot; implements `arl.protocols.Env`."""

    def __init__(self, cfg: OpenSpielConfig, variant: int = 0):
        """`variant`: the episode's index in its group (used with opponent_stream=episode)."""
        self.cfg = cfg
        self._variant = variant
        self.game = load_game(cfg.game)
        self.title = self.game.get_type().long_name
        size = self.game.num_distinct_actions()
        self.tool = move_tool(cfg.tool_name, cfg.tool_arg, size,
                              f"Make your move in {self.title}.",
                              "The number of one of the legal actions listed.")
        self._done: bool | None = None

    def reset(self, seed: int) -> EnvReset:
        self._rng = random.Random(seed)
        drawn = self._rng.choice((0, 1))  # drawn even for a fixed seat: the same stream
        self.agent = drawn if self.cfg.seat == "random" else int(self.cfg.seat)
        bot_seed = self._rng.randrange(2**31)  # drawn in either mode: the deal stays the same
        if self.cfg.opponent_stream == "episode":
            bot_seed = random.Random(f"{seed}:{self._variant}").randrange(2**31)
        self._bot = _bot(self.game, self.cfg, 1 - self.agent, bot_seed)
        self.state = self.game.new_initial_state()
        self._moves: list[int] = []
        self._done = False
        self._advance()
        system = (f"You play {self.title} as player {self.agent} against an opponent. Reply "
                  f"with one {self.tool.name} tool call per turn.")
        return EnvReset((Message("system", system), Message("user", self._prompt())),
                        (self.tool,))

    def step(self, turn: ParsedTurn) -> EnvStep:
        if self._done is None or self._done:
            raise RuntimeError("step() before reset() or after the episode ended")
        state_name = self._view()
        legal = self.state.legal_actions()
        number = read_move(turn, self.tool, self.cfg.tool_arg, self.game.num_distinct_actions())
        if isinstance(number, ToolCallError) or number > len(legal):
            why = (f"Invalid tool call ({number.kind.value})" if isinstance(number, ToolCallError)
                   else f"Illegal move: there are {len(legal)} legal actions")
            return self._end(f"{why}. Game over.", "invalid", self.cfg.reward_invalid,
                             state_name)
        action = legal[number - 1]
        text = f"You played {self.state.action_to_string(self.agent, action)}."
        self.state.apply_action(action)
        self._moves.append(number)
        text += self._advance()
        if self.state.is_terminal():
            value = float(self.state.returns()[self.agent])
            kind = "win" if value > 0 else "loss" if value < 0 else "draw"
            return self._end(f"{text}\nGame over: your return is {value:g}.", kind,
                             value * self.cfg.reward_scale, state_name)
        return EnvStep((Message("tool", f"{text}\n{self._prompt()}"),), 0.0, False, False,
                       turn_state=state_name)

    def _advance(self) -> str:
        """Play chance nodes and the bot until the agent is to move or the game ends; the
        bot's moves as text."""
        said = ""
        while not self.state.is_terminal():
            if self.state.is_chance_node():
                outcomes, probs = zip(*self.state.chance_outcomes(), strict=True)
                self.state.apply_action(self._rng.choices(outcomes, weights=probs)[0])
            elif self.state.current_player() == self.agent:
                break
            else:
                player = self.state.current_player()
                action = self._bot.step(self.state)
                said += f" Opponent played {self.state.action_to_string(player, action)}."
                self.state.apply_action(action)
        return said

    def _view(self) -> str:
        """What the agent may know of the state, as OpenSpiel renders it for its seat: the
        observation (the board) in perfect-information games, else the information state
        (e.g. a card and the betting so far), else the state."""
        import pyspiel

        kind = self.game.get_type()
        perfect = kind.information == pyspiel.GameType.Information.PERFECT_INFORMATION
        if kind.provides_observation_string and (perfect or not
                                                 kind.provides_information_state_string):
            return self.state.observation_string(self.agent)
        if kind.provides_information_state_string:
            return f"Your information state: {self.state.information_state_string(self.agent)}"
        return str(self.state)

    def _prompt(self) -> str:
        legal = self.state.legal_actions()
        names = ", ".join(f"{i} = {self.state.action_to_string(self.agent, a)}"
                          for i, a in enumerate(legal, start=1))
        return f"{self._view().rstrip()}\nLegal actions: {names}.\nYour move."

    def _end(self, text: str, kind: str, reward: float, state_name: str) -> EnvStep:
        self._done = True
        return EnvStep((Message("tool", text),), float(reward), True, False,
                       Outcome(kind, kind, tuple(self._moves)), turn_state=state_name)


def _check(env: OpenSpielConfig, cfg: Any) -> None:
    """The game must load and be one this adapter plays: two players, turn by turn."""
    try:
        game = load_game(env.game)
    except ImportError as err:
        raise ConfigError("env.name", str(err)) from None
    except Exception as err:  # noqa: BLE001 - pyspiel raises its own error for a bad name
        raise ConfigError("env.game", f"OpenSpiel cannot load {env.game!r}: {err}") from None
    import pyspiel

    kind = game.get_type()
    if game.num_players() != 2 or kind.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        raise ConfigError("env.game", f"{env.game!r} is not a two-player turn-based game")
    if env.opponent == "alpha_beta" and (
            kind.chance_mode != pyspiel.GameType.ChanceMode.DETERMINISTIC
            or kind.information != pyspiel.GameType.Information.PERFECT_INFORMATION):
        raise ConfigError("env.opponent", f"alpha_beta needs a deterministic perfect-"
                          f"information game; {env.game!r} is not: use mcts or random")


def _eval_game(env: OpenSpielConfig, opponent: str, seat: str) -> tuple[str, OpenSpielConfig]:
    """Evaluation plays the same game against `opponent` (one of BOTS), seat 0 or 1 for the
    X / O of `eval.opponents`' seats."""
    if opponent not in BOTS:
        raise ValueError(f"opponent must be one of {list(BOTS)} for OpenSpiel games; "
                         f"got {opponent!r}")
    seat_id = {"X": "0", "O": "1"}.get(seat, seat)
    return env.name, dataclasses.replace(env, opponent=opponent, seat=seat_id)


def _reference(env: OpenSpielEnv, player: str, rng: random.Random) -> ToolCall:
    """Reference players (arl/rollout/reference.py): `random` plays a uniformly random legal
    action; `perfect` plays the best response to the uniformly random bot, exactly
    (OpenSpiel's best_response against its policy), so it needs `env.opponent: random`."""
    legal = env.state.legal_actions()
    if player == "random":
        index = rng.randrange(len(legal))
    elif player == "perfect":
        if env.cfg.opponent != "random":
            raise ValueError("the perfect player is the best response to the random bot: "
                             f"env.opponent is {env.cfg.opponent!r}")
        info = env.state.information_state_string(env.agent)
        index = legal.index(_best_response(env.cfg.game, env.agent).best_response_action(info))
    else:
        raise ValueError(f"reference player must be random or perfect, got {player!r}")
    return ToolCall(env.tool.name, {env.cfg.tool_arg: index + 1})


@functools.lru_cache(maxsize=8)
def _best_response(game_name: str, seat: int) -> Any:
    """OpenSpiel's best response of seat `seat` to a uniformly random opponent."""
    from open_spiel.python import policy as policy_lib
    from open_spiel.python.algorithms import best_response

    game = load_game(game_name)
    return best_response.BestResponsePolicy(game, seat, policy_lib.UniformRandomPolicy(game))


def _legal_calls(env: OpenSpielEnv) -> list[ToolCall]:
    return [ToolCall(env.tool.name, {env.cfg.tool_arg: i})
            for i in range(1, len(env.state.legal_actions()) + 1)]


SPEC = EnvSpec(
    name="openspiel",
    factory=lambda cfg, ctx: OpenSpielEnv(cfg, ctx.variant),
    config=OpenSpielConfig,
    outcomes=OUTCOMES,
    max_turns=200,
    check=_check,
    eval_game=_eval_game,
    legal_calls=_legal_calls,
    reference=_reference,
)

