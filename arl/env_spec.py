"""What the core knows of an env: its `EnvSpec`, found by the name in `env.name`.

`env.name` is one of
- a registered name: an `arl.envs` entry point of any installed package (arl registers its
  own games this way, in pyproject.toml), e.g. `tictactoe_move`;
- `package.module:attr` for code outside arl, where `attr` is an `EnvSpec` or a factory
  function `make(cfg) -> Env` (or `make(cfg, ctx)`) whose first parameter is annotated with
  its config type (an `EnvConfig` subclass; unannotated: plain `EnvConfig`); the factory's
  optional attributes `outcomes`, `max_turns`, `legal_calls` and `reference` fill those
  fields of its spec.

The core reads every game fact it needs from the spec (outcome kinds, turn budget, the hooks
below) and from the typed `Outcome` an env reports on an episode's last step; it
never names a game. Resolving imports the env's module, so it may run in any process: a
rollout worker resolves the same name to the same spec.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

from arl.errors import UserError
from arl.protocols import Env
from arl.schema import EnvConfig
from arl.types import ToolCall

ENTRY_POINT_GROUP = "arl.envs"


@dataclass(frozen=True)
class EnvContext:
    """What an env may be built with besides its config.

    `variant` is the episode's index in its group (envs whose groups play equivalent variants
    of one start state use it; others ignore it). `opponent` is an opponent object the
    caller supplies, e.g. a frozen snapshot of the policy for self-play; None: the env builds
    what its config names.
    """

    variant: int = 0
    opponent: Any = None


@dataclass(frozen=True)
class SelfPlay:
    """How an env plays a frozen snapshot of the policy. The rollout worker keeps the
    snapshot (new weights every `refresh_every` learner steps) and hands `opponent(choose)`
    to each env as `EnvContext.opponent`, where `choose(prompt, calls, rng) -> index` is the
    snapshot's pick among well-formed `calls` (ToolCalls) after `prompt` (an EnvReset: what
    the agent would be asked in the opponent's seat)."""

    opponent: Callable[[Callable[..., int]], Any]
    refresh_every: int


@dataclass(frozen=True)
class EnvSpec:
    """One env as the core sees it.

    factory      (cfg, ctx) -> Env: a fresh env for one episode at a time
    config       its config type: an `EnvConfig` subclass whose fields are the `env.*` keys
    outcomes     every `Outcome.kind` it reports (metrics log each, 0 when absent)
    max_turns    model turns a whole episode may take (evaluation plays to the end)
    check        optional (env_cfg, cfg) -> None that raises `arl.config.ConfigError` for
                 values that tie the env to other sections; run before Ray starts
    self_play    optional env_cfg -> SelfPlay or None: how this config plays a frozen
                 snapshot of the policy, where it does
    schedule     optional (env_cfg, version) -> env_cfg: the config the episodes played
                 with the weights of learner step `version` use (a curriculum)
    eval_game    optional (env_cfg, opponent, seat) -> (env name, env_cfg): the full game
                 that evaluation plays against `opponent` (an `eval.opponents` spelling) in
                 `seat`; None: the env has no opponents to evaluate against
    position     optional (env_cfg, row) -> (env, good actions): an env that starts from one
                 row of a positions file (a JSON object), and the actions that solve it;
                 raises ValueError for a malformed row; None: no positions files
    legal_calls  optional env -> [ToolCall]: the well-formed call of every legal move of a
                 live episode's env, for warm starts that teach the format with uniformly
                 random legal moves (`arl warmstart` with `warmstart.env`)
    reference    optional (env, player, rng) -> ToolCall: the call a reference player makes
                 in a live episode's env, `random` (a uniformly random legal move) or
                 `perfect` (the best play the env knows); raises ValueError for a player it
                 does not have. What results are read against (arl/rollout/reference.py)
    """

    name: str
    factory: Callable[[Any, EnvContext], Env]
    config: type = EnvConfig
    outcomes: tuple[str, ...] = ()
    max_turns: int = 1
    check: Callable[[Any, Any], None] | None = None
    self_play: Callable[[Any], SelfPlay | None] | None = None
    schedule: Callable[[Any, int], Any] | None = None
    eval_game: Callable[[Any, str, str], tuple[str, Any]] | None = None
    position: Callable[[Any, dict], tuple[Env, tuple[int, ...]]] | None = None
    legal_calls: Callable[[Any], list[ToolCall]] | None = None
    reference: Callable[[Any, str, Any], ToolCall] | None = None

    def make(self, cfg: EnvConfig, ctx: EnvContext | None = None) -> Env:
        """A new env for `cfg` (which must be of this spec's config type)."""
        if not isinstance(cfg, self.config):
            raise TypeError(f"env {self.name!r} takes a {self.config.__name__}, "
                            f"got {type(cfg).__name__}")
        return self.factory(cfg, ctx or EnvContext())


def spec_from_factory(name: str, factory: Callable[..., Env]) -> EnvSpec:
    """An EnvSpec for a plain factory `make(cfg) -> Env` or `make(cfg, ctx) -> Env`; its
    config type is the annotation of the first parameter (plain `EnvConfig` if none)."""
    params = list(inspect.signature(factory).parameters.values())
    if not params:
        raise UserError(f"env {name!r}: the factory must take the env config")
    hints = typing.get_type_hints(factory)
    config = hints.get(params[0].name, EnvConfig)
    if not (isinstance(config, type) and issubclass(config, EnvConfig)
            and dataclasses.is_dataclass(config)):
        raise UserError(f"env {name!r}: the factory's config type {config!r} must be a "
                        "dataclass subclass of arl.config.EnvConfig")
    takes_ctx = len(params) > 1

    def build(cfg: Any, ctx: EnvContext) -> Env:
        return factory(cfg, ctx) if takes_ctx else factory(cfg)

    outcomes = tuple(getattr(factory, "outcomes", ()))
    return EnvSpec(name=name, factory=build, config=config, outcomes=outcomes,
                   max_turns=int(getattr(factory, "max_turns", 1)),
                   legal_calls=getattr(factory, "legal_calls", None),
                   reference=getattr(factory, "reference", None))


def registered_names() -> list[str]:
    """The names of every `arl.envs` entry point installed."""
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


@lru_cache(maxsize=64)
def resolve_env(name: str) -> EnvSpec:
    """The EnvSpec `env.name` names (see the module docstring); UserError, one line, if
    there is none."""
    if ":" in name:
        return _as_spec(name, import_attr("env", name))
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        known = ", ".join(registered_names())
        if not known:  # arl's own are entry points too: an install older than them
            raise UserError(f"unknown env {name!r}: no env is installed; reinstall arl "
                            "(pip install -e .) to register its own")
        raise UserError(f"unknown env {name!r}: registered envs are {known}; or name a "
                        "factory as package.module:make")
    return _as_spec(name, found[0].load())


def import_attr(kind: str, name: str) -> Any:
    """What `package.module:attr` names; UserError, one line naming the `kind` (env,
    agent) and what is missing, if it names nothing."""
    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        raise UserError(f"{kind} {name!r}: name it as package.module:attr")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except ModuleNotFoundError as err:
        raise UserError(f"{kind} {name!r}: no module {err.name!r} (is it on PYTHONPATH, or "
                        "installed?)") from None
    except AttributeError:
        raise UserError(f"{kind} {name!r}: module {module_name!r} has no {attr!r}") from None


def _as_spec(name: str, target: Any) -> EnvSpec:
    if isinstance(target, EnvSpec):  # it keeps its own name: `default` is an alias
        return target
    if callable(target):
        return spec_from_factory(name, target)
    raise UserError(f"env {name!r} is neither an EnvSpec nor a factory function")
