"""The exact record of one agent episode: chat-completion requests in, token ids out.

`AgentEpisode.prompt(body)` checks one `/v1/chat/completions` request body and returns the
token ids to sample from; `complete(generation)` records what was sampled and returns the
response body. The record is token-exact, as in arl/episode.py:

- The first request is rendered whole with the chat template: the prompt of the first row.
- A request that extends the recorded conversation (the same messages and tools as before,
  the last reply as the endpoint returned it, then new user or tool messages) extends the
  row: only the new messages are rendered (`ChatRenderer.reply_ids`), so sampled ids are
  never re-tokenised and earlier turns never re-rendered.
- A request that does not extend it (the agent dropped or summarised turns, changed the
  tools) starts a new training row, rendered whole; counted in `rollout/prefix_splits`. The
  learner trains each row as its own sequence with weight 1/rows (arl/learner/collate.py).
- Every assistant message in a request must be a reply this endpoint sampled in this
  episode: a history may drop turns but not rewrite what the model said.

Sampling settings are pinned to the config: a request that sets temperature, top_p,
max_tokens or n to anything else, streams, or asks for stop strings, penalties, logit_bias,
seeds or response formats is refused (`RequestError`, HTTP 400), so an agent can never train
on samples from a policy other than the one the learner assumes. Refusals are counted in
`rollout/agent_request_errors`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from arl.episode import ChatRenderer, parse_turn
from arl.tool_schema import schema_problem
from arl.types import Generation, Message, ToolCall, ToolCallError, ToolSchema, Turn

TOOL_CALL_ERROR = "arl_tool_call_error"  # the assistant message's key for a failed parse
SCHEMA_SUBSET = ("object, array, integer, number, string, boolean with properties, required, "
                 "items, minimum, maximum, minItems, maxItems, minLength, maxLength, enum")
MAX_MESSAGE_CHARS = 100_000  # one message's content; more is refused, not truncated
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
         "tool": "tool"}
IGNORED = {"model", "user", "metadata", "store", "parallel_tool_calls", "logprobs",
           "stream_options", "messages", "tools", "tool_choice"}
REFUSED = {"stop", "presence_penalty", "frequency_penalty", "logit_bias", "seed",
           "response_format", "top_logprobs", "functions", "function_call", "prediction",
           "audio", "modalities", "reasoning_effort", "service_tier", "web_search_options"}


class RequestError(Exception):
    """A request the endpoint refuses: HTTP `status`, a one-line `message`, the `param`."""

    def __init__(self, message: str, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.message, self.param, self.status = message, param, status


@dataclass(frozen=True)
class Pinned:
    """The sampling settings every request of a run gets."""

    temperature: float
    top_p: float
    max_new_tokens: int
    max_turns: int
    max_model_len: int = 0  # the engine's longest prompt + completion; 0: unknown


@dataclass
class AgentEpisode:
    """The record of one agent episode (see the module docstring). Not thread-safe: one
    request at a time."""

    renderer: ChatRenderer
    pinned: Pinned
    index: int  # the episode's index in its collect call (ids of tool calls name it)
    ids: list[int] = field(default_factory=list)  # every row, back to back
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    row_starts: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    tool_calls: int = 0
    invalid_calls: int = 0
    prefix_splits: int = 0
    request_errors: int = 0
    failure: str | None = None  # why the record cannot be trained on
    _answered: int = 0  # len(ids) after the last completion: a prompt never answered is cut
    _expected: list[tuple] | None = None  # what a request extending the row starts with
    _history: list[Message] = field(default_factory=list)  # the row, as rendered
    _tools: tuple[ToolSchema, ...] = ()
    _finished: bool = True  # the last completion ended on the stop id
    _sampled: dict[tuple, list[str]] = field(default_factory=dict)  # reply -> sampled texts
    _pending: tuple = ()  # (messages, tools, keys, parse) of the prompt being answered

    def prompt(self, body: Any) -> list[int]:
        """The ids to sample the next completion from, the row extended or a new row begun;
        RequestError (counted) for a request the endpoint refuses."""
        try:
            return self._prompt(body)
        except RequestError:
            self.request_errors += 1
            raise

    def _prompt(self, body: Any) -> list[int]:
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        _check_settings(body, self.pinned)
        if len(self.turns) >= self.pinned.max_turns:
            raise RequestError(f"this episode's {self.pinned.max_turns} completions "
                               "(rollout.max_turns) are spent", "messages")
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw:
            raise RequestError("messages must be a non-empty list", "messages")
        keys = [_message_key(m, i, self._sampled) for i, m in enumerate(raw)]
        tools = _tools(body.get("tools"))
        messages = _as_messages(keys, self._sampled)
        expected = self._expected
        extends = (expected is not None and tools == self._tools
                   and keys[: len(expected)] == expected
                   and all(k[0] != "assistant" for k in keys[len(expected):]))
        if extends:
            new = messages[len(expected):]
            ids = _rendered(lambda: self.renderer.reply_ids(self._history, new, tools))
            if not self._finished:  # close the cut-off turn so the template lines up
                ids = [self.renderer.stop_id, *ids]
            messages = [*self._history, *new]
            length = self._answered - self._row_start() + len(ids)
        else:
            ids = _rendered(lambda: self.renderer.conversation_ids(messages, tools))
            length = len(ids)
        _check_length(length, self.pinned)
        self._cut(self._answered)  # a prompt that was never answered is not part of the row
        if not extends and self.ids:
            self.row_starts.append(len(self.ids))
            self.prefix_splits += 1
        self._pending = (messages, tools, keys, bool(tools) and
                         body.get("tool_choice", "auto") != "none")
        self._append(ids, None)
        return list(self.ids[self._row_start():])

    def complete(self, generation: Generation, model: str) -> dict[str, Any]:
        """Record one sampled completion of the last prompt; the chat.completion body.
        Non-finite log-probs fail the episode (RequestError, HTTP 500)."""
        ids, finished = generation.token_ids, generation.finished
        if not np.isfinite(generation.sampler_logprobs).all():
            self.failure = "the engine returned non-finite sampler log-probs"
            raise RequestError(self.failure, status=500)
        messages, tools, keys, parse = self._pending
        start = len(self.ids)
        self._append(ids.tolist(), generation.sampler_logprobs.tolist())
        self._answered = len(self.ids)
        body = ids[:-1] if finished else ids  # the stop id is not part of the text
        text = self.renderer.tokenizer.decode(body.tolist(), skip_special_tokens=False)
        self.turns.append(Turn(start, len(self.ids), 0.0))
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = "stop" if finished else "length"
        if parse:
            try:
                turn = parse_turn(text, finished, tools)
            except Exception as err:  # a schema the checks let through: never trained on
                self.failure = f"the tools could not be applied: {type(err).__name__}"
                raise RequestError(self.failure, "tools", status=400) from None
            self.tool_calls += isinstance(turn, ToolCall)
            self.invalid_calls += isinstance(turn, ToolCallError)
            message, finish = _with_call(message, turn, finish, f"call_{self.index}_"
                                         f"{len(self.turns)}")
        key = _key_of(message)
        self._sampled.setdefault(key, []).append(text)
        self._finished, self._tools = finished, tools
        self._history = [*messages, Message("assistant", text)]
        self._expected = [*keys, key]
        usage = {"prompt_tokens": start - self._row_start(), "completion_tokens": len(ids),
                 "total_tokens": len(self.ids) - self._row_start()}
        return {"id": f"chatcmpl-{self.index}-{len(self.turns)}", "object": "chat.completion",
                "created": 0, "model": model, "usage": usage,
                "choices": [{"index": 0, "message": message, "finish_reason": finish,
                             "logprobs": None}]}

    def _cut(self, end: int) -> None:
        """Drop every id from `end` on (and rows that begin there)."""
        del self.ids[end:], self.mask[end:], self.logprobs[end:]
        self.row_starts = [r for r in self.row_starts if r < end]

    def _row_start(self) -> int:
        return self.row_starts[-1] if self.row_starts else 0

    def _append(self, ids: Sequence[int], logprobs: Sequence[float] | None) -> None:
        """Append ids: sampled (with their logprobs) or not (logprobs None); the mask is
        written here and nowhere else."""
        self.ids.extend(int(i) for i in ids)
        self.mask.extend([0 if logprobs is None else 1] * len(ids))
        self.logprobs.extend([0.0] * len(ids) if logprobs is None else logprobs)

    @property
    def messages(self) -> tuple[Message, ...]:
        """The conversation of the last row as rendered (replies as sampled text)."""
        return tuple(self._history)

    def result_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(token_ids int32, loss_mask int8, sampler_logprobs float32) of every row, up to
        the last completion."""
        self._cut(self._answered)
        return (np.asarray(self.ids, dtype=np.int32), np.asarray(self.mask, dtype=np.int8),
                np.asarray(self.logprobs, dtype=np.float32))


def _rendered(render: Any) -> list[int]:
    """render(), a template's refusal as a RequestError."""
    try:
        return render()
    except Exception as err:  # a template that refuses the conversation
        raise RequestError(f"the chat template cannot render these messages: "
                           f"{type(err).__name__}: {str(err)[:200]}", "messages") from None


def _message_key(raw: Any, i: int, sampled: dict[tuple, list[str]]) -> tuple:
    """A message as compared across requests; RequestError for a malformed one or an
    assistant message this endpoint did not sample."""
    where = f"messages[{i}]"
    if not isinstance(raw, dict):
        raise RequestError(f"{where} must be an object", where)
    role = raw.get("role")
    if role not in ROLES:
        raise RequestError(f"{where}.role must be one of {sorted(ROLES)}, got "
                           f"{str(role)[:40]!r}", f"{where}.role")
    content = _text(raw.get("content"), where)
    if len(content) > MAX_MESSAGE_CHARS:
        raise RequestError(f"{where}.content has {len(content)} characters; the limit is "
                           f"{MAX_MESSAGE_CHARS}", f"{where}.content")
    key = _key_of({**raw, "role": ROLES[role], "content": content})
    if key[0] == "assistant" and key not in sampled:
        raise RequestError(f"{where} is an assistant message this endpoint did not sample "
                           "in this episode: a history may drop turns, not rewrite them",
                           where)
    return key


def _as_messages(keys: list[tuple], sampled: dict[tuple, list[str]]) -> list[Message]:
    """The messages as the template renders them: the n-th copy of a reply in a request
    as the n-th text sampled with that key (two texts can make one tool call)."""
    seen: dict[tuple, int] = {}
    out = []
    for key in keys:
        if key[0] == "assistant":
            texts, n = sampled[key], seen.get(key, 0)
            seen[key] = n + 1
            out.append(Message("assistant", texts[min(n, len(texts) - 1)]))
        else:
            out.append(Message(key[0], key[1]))
    return out


def _check_length(prompt: int, pinned: Pinned) -> None:
    """RequestError if a prompt of `prompt` ids leaves no room for a whole completion."""
    limit = pinned.max_model_len
    if limit and prompt + pinned.max_new_tokens > limit:
        raise RequestError(f"the prompt has {prompt} tokens: with max_tokens "
                           f"{pinned.max_new_tokens} it exceeds the model's context "
                           f"of {limit}", "messages")


def _check_settings(body: dict[str, Any], p: Pinned) -> None:
    """RequestError for a request that asks for other sampling than the run's."""
    pinned = {"temperature": p.temperature, "top_p": p.top_p, "n": 1,
              "max_tokens": p.max_new_tokens, "max_completion_tokens": p.max_new_tokens}
    for key, value in body.items():
        if key in pinned:
            if value is not None and value != pinned[key]:
                raise RequestError(f"{key} is pinned to {pinned[key]} by the run's config "
                                   f"(got {value!r}); omit it", key)
        elif key == "stream":
            if value:
                raise RequestError("streaming is not supported; omit stream", key)
        elif key in REFUSED:
            if value is not None:
                raise RequestError(f"{key} is not supported: the endpoint samples with the "
                                   "run's settings only; omit it", key)
        elif key not in IGNORED:
            raise RequestError(f"unknown request field {key[:40]!r}", key)
    if body.get("tool_choice", "auto") not in ("auto", "none"):
        raise RequestError("tool_choice must be auto or none", "tool_choice")


def _text(content: Any, where: str) -> str:
    """A message's content as text: a string, null, or a list of text parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise RequestError(f"{where}.content must be a string or a list of text parts",
                       f"{where}.content")


def _key_of(message: dict[str, Any]) -> tuple:
    """(role, content, tool calls as (name, canonical JSON arguments)): what two copies of
    one message share, whatever ids or null fields a client adds."""
    calls = []
    if not isinstance(message.get("tool_calls") or [], list):
        raise RequestError("tool_calls must be a list", "messages")
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise RequestError("a tool call must carry a function", "messages")
        calls.append((str(function.get("name")), _canonical(function.get("arguments"))))
    return (message["role"], message.get("content") or "", tuple(calls))


def _canonical(arguments: Any) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return str(arguments)


def _tools(raw: Any) -> tuple[ToolSchema, ...]:
    """The request's `tools` as ToolSchemas; RequestError for a malformed one."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise RequestError("tools must be a list", "tools")
    tools = []
    for i, tool in enumerate(raw):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (not isinstance(function, dict) or tool.get("type", "function") != "function"
                or not isinstance(function.get("name"), str)):
            raise RequestError(f"tools[{i}] must be {{type: function, function: {{name, "
                               "description, parameters}}}}", f"tools[{i}]")
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            raise RequestError(f"tools[{i}].function.parameters must be an object schema",
                               f"tools[{i}]")
        problem = schema_problem(parameters, f"tools[{i}].function.parameters")
        if problem:  # refused before anything is sampled: nothing of this turn is recorded
            raise RequestError(f"{problem} (arl's tool schemas: {SCHEMA_SUBSET})",
                               f"tools[{i}]")
        tools.append(ToolSchema(function["name"], str(function.get("description") or ""),
                                parameters))
    return tuple(tools)


def _with_call(message: dict[str, Any], turn: ToolCall | ToolCallError, finish: str,
               call_id: str) -> tuple[dict[str, Any], str]:
    """The assistant message and finish reason for a parsed completion."""
    if isinstance(turn, ToolCall):
        call = {"id": call_id, "type": "function",
                "function": {"name": turn.name, "arguments": json.dumps(turn.arguments)}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    return {**message, TOOL_CALL_ERROR: {"kind": turn.kind.value, "message": turn.message}
            }, finish
