"""Agent functions: your own code plays each episode through an OpenAI-compatible endpoint.

`env.agent: package.module:run_agent` names

    async def run_agent(client: openai.AsyncOpenAI, task: AgentTask) -> float | AgentResult

which drives any conversation with `await client.chat.completions.create(messages=...,
tools=...)` and returns the episode's reward. The endpoint (arl/rollout/agent_endpoint.py, bound
to `rollout.endpoint_host`) belongs to that one episode: it samples with the run's policy and
settings and records the exact tokens (arl/agent_record.py), so the learner trains on what was
sampled, never on a re-tokenised conversation. Tool calls are parsed with arl's parser
(arl/tools.py) and come back as OpenAI `tool_calls`; a turn that did not parse comes back as
text with the reason in `message.arl_tool_call_error` ({kind, message}); `parsed_turn` turns a
completion into the ToolCall or ToolCallError an arl env's `step` takes.

An agent that raises (a BadRequestError from a refused request included) fails its episode:
the episode's group is not trained on and the run goes on.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from arl.agent_record import TOOL_CALL_ERROR
from arl.env_spec import EnvContext, import_attr, resolve_env
from arl.errors import UserError
from arl.protocols import Env
from arl.schema import EnvConfig
from arl.types import Outcome, ToolCall, ToolCallError, ToolCallErrorKind


@dataclass(frozen=True)
class AgentTask:
    """What one episode of an agent function starts from.

    `seed` is the env seed (the G episodes of a group share it, so they start alike);
    `variant` is the episode's index in its group; `env` is the run's env section (at this
    policy version, where the env has a curriculum); `model` is the name to pass as
    `model=` (the endpoint accepts any); `max_turns` is how many completions the endpoint
    grants this episode (rollout.max_turns)."""

    seed: int
    group_id: int
    variant: int
    env: EnvConfig
    model: str = "arl-policy"
    max_turns: int = 1
    opponent: Any = None  # the self-play opponent, where the env has one

    def make_env(self) -> Env:
        """A fresh env of the run's `env.name` for this episode (call `reset(task.seed)`)."""
        return resolve_env(self.env.name).make(self.env, EnvContext(self.variant, self.opponent))


@dataclass(frozen=True)
class AgentResult:
    """An episode's result, richer than a float.

    reward        the episode's reward (what GSPO's group advantage normalises)
    outcome       how it ended, as an arl env reports it (rollout/outcome_* metrics)
    turn_rewards  one per completion, in order, for turn-level credit (learner.advantage.level:
                  turn); () puts the whole reward on the last completion
    turn_states   one name per completion (EnvStep.turn_state), or ()
    metrics       the agent's own numbers, logged as `agent/<name>` (mean over episodes)
    """

    reward: float
    outcome: Outcome | None = None
    turn_rewards: tuple[float, ...] = ()
    turn_states: tuple[str | None, ...] = ()
    metrics: dict[str, float] = field(default_factory=dict)


def as_result(value: Any) -> AgentResult:
    """An agent function's return value as an AgentResult; ValueError, one line, if it is
    neither a finite number nor an AgentResult with finite numbers."""
    result = value if isinstance(value, AgentResult) else None
    if result is None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"run_agent returned {type(value).__name__}, not a float or an "
                             "AgentResult")
        result = AgentResult(float(value))
    numbers = [result.reward, *result.turn_rewards, *result.metrics.values()]
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in numbers):
        raise ValueError("run_agent returned a reward or metric that is not a finite number")
    return result


def parsed_turn(completion: Any) -> ToolCall | ToolCallError:
    """The parse result of a chat completion from an arl endpoint: its tool call as arl's
    ToolCall, or the ToolCallError the endpoint reported (MISSING if neither is there)."""
    message = _as_dict(completion)["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    if calls:
        function = calls[0]["function"]
        return ToolCall(function["name"], json.loads(function["arguments"]))
    error = message.get(TOOL_CALL_ERROR)
    if error:
        return ToolCallError(ToolCallErrorKind(error["kind"]), error["message"])
    return ToolCallError(ToolCallErrorKind.MISSING, "no tool call found; call exactly one tool")


def _as_dict(completion: Any) -> dict[str, Any]:
    if isinstance(completion, dict):
        return completion
    return completion.model_dump()  # an openai ChatCompletion (pydantic; keeps extra keys)


def resolve_agent(name: str) -> Callable[..., Any]:
    """The `async def run_agent(client, task)` that `env.agent` names (package.module:attr);
    UserError, one line, if it is not there or not an async function of two parameters."""
    target = import_attr("agent", name)
    if not inspect.iscoroutinefunction(target):
        raise UserError(f"agent {name!r} must be an async function run_agent(client, task)")
    if len(inspect.signature(target).parameters) != 2:
        raise UserError(f"agent {name!r} must take two parameters: (client, task)")
    return target
