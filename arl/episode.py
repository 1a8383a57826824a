"""The multi-turn episode loop: the one place that appends tokens to a trajectory.

A batch of episodes advances turn by turn: every live episode's token ids go to the engine
together, each sampled turn is parsed as a tool call and handed to its env, and the env's
reply is appended as tokens. Sampled ids are kept exactly as the engine produced them (never
re-tokenised); env ids come from rendering only the *new* text of the conversation with the
chat template. `loss_mask` is set at the moment tokens are appended: 1 for sampled ids,
0 for everything else.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from arl.bounded import BoundedCalls, CallTimedOut
from arl.protocols import Env, RolloutEngine
from arl.tools import parse_tool_call
from arl.types import (
    EnvReset,
    Message,
    Outcome,
    SamplingParams,
    ToolCall,
    ToolCallError,
    ToolCallErrorKind,
    Trajectory,
    Turn,
)


@dataclass
class _Episode:
    """Mutable state of one running episode (private to this module)."""

    env: Env
    start: EnvReset
    group_id: int
    messages: list[Message]
    ids: list[int]
    mask: list[int]
    logprobs: list[float]
    reward: float = 0.0
    turns: int = 0
    tool_calls: int = 0
    invalid_calls: int = 0
    done: bool = False
    outcome: Outcome | None = None
    failure: str | None = None
    turn_log: list[Turn] = field(default_factory=list)
    row_starts: list[int] = field(default_factory=list)
    closed: list[Message] = field(default_factory=list)  # the conversations restarted from
    env_seconds: float = 0.0  # time spent in the env's reset and steps so far
    timed_out: bool = False

    def context(self) -> list[int]:
        """The ids the next turn is sampled after: the current training row's."""
        return self.ids[self.row_starts[-1]:] if self.row_starts else self.ids

    def append(self, ids: Sequence[int], sampled: bool, logprobs: Sequence[float] = ()) -> None:
        """Append ids; the mask and logprobs are written here and nowhere else."""
        self.ids.extend(int(i) for i in ids)
        self.mask.extend([1 if sampled else 0] * len(ids))
        self.logprobs.extend(logprobs if sampled else [0.0] * len(ids))


class ChatRenderer:
    """Turns conversations into token ids with a tokenizer's chat template.

    `prompt_ids` renders the opening messages; `reply_ids` renders only what the template
    adds after an assistant turn that ended on the stop token: the env's messages and the
    next generation prompt. The stop token is the split point, so sampled ids never need
    re-tokenising.
    """

    # Openings repeat across steps too: the demo's board distribution has about 3,700
    # distinct prompts, so by step 300 nine in ten episodes find theirs here.
    PROMPT_CACHE_SIZE = 8192

    def __init__(self, tokenizer: Any, stop_token: str):
        self.tokenizer = tokenizer
        self.stop_token = stop_token
        self.stop_id = int(tokenizer.convert_tokens_to_ids(stop_token))
        # The G episodes of a group open with the same messages: render them once. Rendering
        # (the Jinja template, then tokenising) was about half of the rollout worker's time
        # outside the engine.
        self._prompts: dict[tuple[Any, ...], tuple[int, ...]] = {}
        # Some chat templates (SmolLM2's) ignore `tools=`: the model would never see them.
        self.inline_tools = _template_ignores_tools(tokenizer)

    def _render(self, messages: Sequence[Message], tools: Sequence[Any], gen: bool) -> str:
        if tools and self.inline_tools:
            messages, tools = with_tools_in_system(messages, tools), ()
        return self.tokenizer.apply_chat_template(
            [m.as_dict() for m in messages],
            tools=[t.as_dict() for t in tools] or None,
            add_generation_prompt=gen,
            tokenize=False,
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(self, start: EnvReset) -> list[int]:
        key = (start.messages, repr(start.tools))
        ids = self._prompts.get(key)
        if ids is None:
            if len(self._prompts) >= self.PROMPT_CACHE_SIZE:
                self._prompts.clear()
            ids = tuple(self.encode(self._render(start.messages, start.tools, gen=True)))
            self._prompts[key] = ids
        return list(ids)

    def conversation_ids(self, messages: Sequence[Message], tools: Sequence[Any]) -> list[int]:
        """Ids of a whole conversation and the next generation prompt (an agent's row)."""
        return self.encode(self._render(messages, tools, gen=True))

    def reply_ids(
        self, history: Sequence[Message], reply: Sequence[Message], tools: Sequence[Any]
    ) -> list[int]:
        """Ids that follow the stop token of the last assistant message in `history`."""
        before = self._render(history, tools, gen=False)
        after = self._render([*history, *reply], tools, gen=True)
        cut = before.rfind(self.stop_token)
        if cut < 0 or not after.startswith(before[: cut + len(self.stop_token)]):
            raise ValueError("chat template does not extend the conversation by appending")
        return self.encode(after[cut + len(self.stop_token) :])


TIMED_OUT = "rollout/timed_out_episodes"  # per episode 0 or 1, summed over a batch

TOOL_CALL_FORMAT = 'To call a tool, reply <tool_call>{"name": ..., "arguments": {...}}</tool_call>'


def tool_signature(tool: Any) -> str:
    """`name(arg: type lo-hi, ...): description`, one line per tool (as the tiny model's
    chat template shows tools)."""
    args = []
    for name, p in tool.parameters.get("properties", {}).items():
        bounds = f" {p['minimum']}-{p['maximum']}" if "minimum" in p and "maximum" in p else ""
        args.append(f"{name}: {p.get('type', 'any')}{bounds}")
    return f"{tool.name}({', '.join(args)})" + (f": {tool.description}" if tool.description else "")


def with_tools_in_system(messages: Sequence[Message], tools: Sequence[Any]) -> list[Message]:
    """The conversation with the tools described at the end of its system message (one is
    added if there is none), for chat templates that do not render tools themselves."""
    text = "# Tools\n" + "\n".join(tool_signature(t) for t in tools) + "\n" + TOOL_CALL_FORMAT
    if messages and messages[0].role == "system":
        return [Message("system", f"{messages[0].content}\n\n{text}"), *messages[1:]]
    return [Message("system", text), *messages]


def _template_ignores_tools(tokenizer: Any) -> bool:
    probe = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    tool = {"type": "function", "function": {
        "name": "probe_tool", "description": "d",
        "parameters": {"type": "object", "properties": {}}}}
    plain = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    with_tool = tokenizer.apply_chat_template(probe, tools=[tool], tokenize=False,
                                              add_generation_prompt=True)
    return plain == with_tool


def parse_turn(text: str, finished: bool, tools: Sequence[Any]) -> ToolCall | ToolCallError:
    """A turn cut off by max_new_tokens is never a valid call, whatever it contains."""
    if not finished:
        return ToolCallError(ToolCallErrorKind.TRUNCATED, "Your reply was cut off.")
    return parse_tool_call(text, tools)


def run_episodes(
    engine: RolloutEngine,
    renderer: ChatRenderer,
    starts: Sequence[tuple[Env, int, int]],
    params: SamplingParams,
    max_turns: int,
    on_turn: Callable[[int], None] | None = None,
    timeout_s: float = 0.0,
) -> list[Trajectory]:
    """Play every (env, env_seed, group_id) in `starts` to the end; return trajectories in order.

    Each turn samples with seed `params.seed + turn` so that a batch is reproducible.
    Episodes end when the env terminates or truncates, or after `max_turns` model turns.
    An exception raised by an env's reset or step, a non-finite reward, or non-finite sampler
    log-probs end that episode only: its trajectory carries `failure` (a reset failure leaves
    it without tokens); the others play on. So does an env whose reset and steps together
    take longer than `timeout_s` (> 0; `rollout.episode_timeout_s`): the call that overruns is
    abandoned (arl/bounded.py) and `rollout/timed_out_episodes` counts the episode.
    """
    calls = EnvCalls(BoundedCalls(), timeout_s)
    episodes = [_Episode(env, EnvReset((), ()), gid, [], [], [], []) for env, _, gid in starts]
    for ep, outcome in zip(episodes, calls.run(episodes, [
            functools.partial(env.reset, seed) for env, seed, _ in starts]), strict=True):
        _start(ep, outcome, renderer, calls.timeout_s)
    for turn in range(max_turns):
        live = [ep for ep in episodes if not ep.done]
        if not live:
            break
        turn_params = SamplingParams(
            params.temperature, params.top_p, params.max_new_tokens, params.seed + turn
        )
        generations = engine.generate([ep.context() for ep in live], turn_params)
        moves = [_sampled(ep, gen, renderer) for ep, gen in zip(live, generations, strict=True)]
        stepping = [(ep, move) for ep, move in zip(live, moves, strict=True) if move is not None]
        outcomes = calls.run([ep for ep, _ in stepping],
                             [functools.partial(ep.env.step, move[0]) for ep, move in stepping])
        for (ep, (_, text, start, finished)), outcome in zip(stepping, outcomes, strict=True):
            _answered(ep, outcome, text, start, finished, renderer, turn + 1 >= max_turns,
                      calls.timeout_s)
        if on_turn is not None:
            on_turn(turn)
    return [_finish(ep, engine.version) for ep in episodes]


@dataclass
class EnvCalls:
    """Calls into the episodes' envs, a batch at a time, each within what is left of
    `timeout_s` (0: no limit) for its episode's env calls together."""

    bounded: BoundedCalls
    timeout_s: float

    def run(self, episodes: Sequence[_Episode], calls: Sequence[Callable[[], Any]]) -> list:
        limits = [self.timeout_s - ep.env_seconds if self.timeout_s > 0 else None
                  for ep in episodes]
        outcomes = self.bounded.run(calls, limits)
        for ep, outcome in zip(episodes, outcomes, strict=True):
            ep.env_seconds += outcome.seconds
        return outcomes


def _start(ep: _Episode, reset: Any, renderer: ChatRenderer, timeout_s: float) -> None:
    """Begin the episode from its env's reset (an Outcome); a reset that raised or ran out of
    time fails it (without tokens)."""
    if reset.error is not None:  # an env bug must not take the other episodes down
        _fail(ep, reset.error, "reset", timeout_s)
        return
    ep.start, ep.messages = reset.value, list(reset.value.messages)
    ep.append(renderer.prompt_ids(reset.value), sampled=False)


def _sampled(ep: _Episode, gen: Any, renderer: ChatRenderer) -> tuple | None:
    """Append one sampled turn (a Generation) and parse it: (the ToolCall or ToolCallError
    for the env, its text, where its ids start, whether it finished), or None when the
    engine's log-probs fail the episode."""
    ids, logprobs, finished = gen.token_ids, gen.sampler_logprobs, gen.finished
    start = len(ep.ids)
    ep.append(ids.tolist(), sampled=True, logprobs=logprobs.tolist())
    if not np.isfinite(logprobs).all():  # a broken engine: never let NaN reach the learner
        ep.failure, ep.done = "the engine returned non-finite sampler log-probs", True
        return None
    body = ids[:-1] if finished else ids  # the stop id is not part of the text
    text = renderer.tokenizer.decode(body.tolist(), skip_special_tokens=False)
    turn = parse_turn(text, finished, ep.start.tools)
    ep.turns += 1
    if isinstance(turn, ToolCall):
        ep.tool_calls += 1
    else:
        ep.invalid_calls += 1
    return turn, text, start, finished


def _answered(ep: _Episode, step: Any, text: str, start: int, finished: bool,
              renderer: ChatRenderer, last_turn: bool, timeout_s: float) -> None:
    """Take the env's answer (an Outcome of env.step) to the turn sampled at `start`, and
    append its reply if the game goes on."""
    if step.error is not None:  # an env bug must not take the other episodes down
        _fail(ep, step.error, "step", timeout_s)
        return
    result = step.value
    reward = _as_float(result.reward)
    if not math.isfinite(reward):
        ep.failure, ep.done = f"env.step returned a non-finite reward ({result.reward!r})", True
        return
    ep.reward += reward
    ep.turn_log.append(Turn(start, len(ep.ids), reward, result.turn_state))
    if result.outcome is not None:
        ep.outcome = result.outcome
    ep.done = result.terminated or result.truncated or last_turn
    history = [*ep.messages, Message("assistant", text)]
    if not ep.done and result.restart is not None:  # a new conversation: a new training row
        ep.closed += [*history, *result.messages]
        ep.row_starts.append(len(ep.ids))
        ep.append(renderer.prompt_ids(result.restart), sampled=False)
        ep.start, ep.messages = result.restart, list(result.restart.messages)
        return
    if not ep.done:
        if not finished:  # close the cut-off turn so the template's next turn lines up
            ep.append([renderer.stop_id], sampled=False)
        ep.append(renderer.reply_ids(history, result.messages, ep.start.tools), sampled=False)
    ep.messages = [*history, *result.messages]  # the conversation, the env's last word included


def _fail(ep: _Episode, err: BaseException, where: str, timeout_s: float) -> None:
    """End the episode for an env call that raised or overran the episode's time."""
    ep.done, ep.timed_out = True, isinstance(err, CallTimedOut)
    ep.failure = (f"env.{where} timed out: the env's calls took over "
                  f"rollout.episode_timeout_s ({timeout_s:g} s)" if ep.timed_out
                  else _describe(err, where))


def _finish(ep: _Episode, version: int) -> Trajectory:
    return Trajectory(
        token_ids=np.asarray(ep.ids, dtype=np.int32),
        loss_mask=np.asarray(ep.mask, dtype=np.int8),
        sampler_logprobs=np.asarray(ep.logprobs, dtype=np.float32),
        reward=ep.reward,
        group_id=ep.group_id,
        policy_version=version,
        num_turns=ep.turns,
        num_tool_calls=ep.tool_calls,
        num_invalid_calls=ep.invalid_calls,
        outcome=ep.outcome,
        failure=ep.failure,
        messages=(*ep.closed, *ep.messages),
        row_starts=tuple(ep.row_starts),
        turns=tuple(ep.turn_log),
        metrics={TIMED_OUT: float(ep.timed_out)},
    )


def _as_float(value: Any) -> float:
    """`value` as a float, NaN if it is not a number at all."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _describe(err: Exception, where: str) -> str:
    """One line naming the exception, cut to 200 characters (it may echo model output)."""
    return f"env.{where} raised {type(err).__name__}: {err}"[:200].replace("\n", " ")
