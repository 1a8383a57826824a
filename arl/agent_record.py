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
  learner trains each row as its own sequence with weight 1/rows (learner/collate.py).
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
from arl.types import Generation, Message, ToolCall, ToolCallError, ToolSchema, Turn

TOOL_CALL_ERROR = "arl_tool_call_error"  # the assistant message's key for a failed parse
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
    _expected: list[tuple] | None = None  # what a request extending the row starts with
    _history: list[Message] = field(default_factory=list)  # the row, as rendered
    _tools: tuple[ToolSchema, ...] = ()
    _parse: bool = True  # parse tool calls in the next completion
    _finished: bool = True  # the last completion ended on the stop id
    _sampled: dict[tuple, str] = field(default_factory=dict)  # reply -> its sampled text
    _request: list[tuple] = field(default_factory=list)

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
        keys = [self._key(m, i) for i, m in enumerate(raw)]
        tools = _tools(body.get("tools"))
        messages = [self._message(key) for key in keys]
        expected = self._expected
        if (expected is not None and tools == self._tools and keys[: len(expected)] == expected
                and all(k[0] != "assistant" for k in keys[len(expected):])):
            new = messages[len(expected):]
            ids = self._render(lambda: self.renderer.reply_ids(self._history, new, tools))
            if not self._finished:  # close the cut-off turn so the template lines up
                ids = [self.renderer.stop_id, *ids]
            messages = [*self._history, *new]
        else:
            ids = self._render(lambda: self.renderer.conversation_ids(messages, tools))
            if self.ids:
                self.row_starts.append(len(self.ids))
                self.prefix_splits += 1
        self._parse = bool(tools) and body.get("tool_choice", "auto") != "none"
        self._history, self._tools, self._request = messages, tools, keys
        self._append(ids, None)
        return list(self.ids[self._row_start():])

    def complete(self, generation: Generation, model: str) -> dict[str, Any]:
        """Record one sampled completion of the last prompt; the chat.completion body."""
        ids, finished = generation.token_ids, generation.finished
        start = len(self.ids)
        self._append(ids.tolist(), generation.sampler_logprobs.tolist())
        body = ids[:-1] if finished else ids  # the stop id is not part of the text
        text = self.renderer.tokenizer.decode(body.tolist(), skip_special_tokens=False)
        self.turns.append(Turn(start, len(self.ids), 0.0))
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = "stop" if finished else "length"
        if self._parse:
            turn = parse_turn(text, finished, self._tools)
            self.tool_calls += isinstance(turn, ToolCall)
            self.invalid_calls += isinstance(turn, ToolCallError)
            message, finish = _with_call(message, turn, finish, f"call_{self.index}_"
                                         f"{len(self.turns)}")
        self._finished = finished
        key = _key_of(message)
        self._sampled[key] = text
        self._history = [*self._history, Message("assistant", text)]
        self._expected = [*self._request, key]
        return {
            "id": f"chatcmpl-{self.index}-{len(self.turns)}", "object": "chat.completion",
            "created": 0, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish,
                         "logprobs": None}],
            "usage": {"prompt_tokens": start - self._row_start(), "completion_tokens": len(ids),
                      "total_tokens": len(self.ids) - self._row_start()},
        }

    def _row_start(self) -> int:
        return self.row_starts[-1] if self.row_starts else 0

    def _append(self, ids: Sequence[int], logprobs: Sequence[float] | None) -> None:
        """Append ids: sampled (with their logprobs) or not (logprobs None); the mask is
        written here and nowhere else."""
        self.ids.extend(int(i) for i in ids)
        self.mask.extend([0 if logprobs is None else 1] * len(ids))
        self.logprobs.extend([0.0] * len(ids) if logprobs is None else logprobs)

    def _render(self, render: Any) -> list[int]:
        try:
            return render()
        except Exception as err:  # a template that refuses the conversation
            raise RequestError(f"the chat template cannot render these messages: "
                               f"{type(err).__name__}: {str(err)[:200]}", "messages") from None

    def _key(self, raw: Any, i: int) -> tuple:
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
        if key[0] == "assistant" and key not in self._sampled:
            raise RequestError(f"{where} is an assistant message this endpoint did not sample "
                               "in this episode: a history may drop turns, not rewrite them",
                               where)
        return key

    def _message(self, key: tuple) -> Message:
        """The message as the template renders it: a reply as its sampled text."""
        if key[0] == "assistant":
            return Message("assistant", self._sampled[key])
        return Message(key[0], key[1])

    @property
    def messages(self) -> tuple[Message, ...]:
        """The conversation of the last row as rendered (replies as sampled text)."""
        return tuple(self._history)

    def result_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(token_ids int32, loss_mask int8, sampler_logprobs float32) of every row."""
        return (np.asarray(self.ids, dtype=np.int32), np.asarray(self.mask, dtype=np.int8),
                np.asarray(self.logprobs, dtype=np.float32))


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
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise RequestError("a tool call must carry a function", "messages")
        calls.append((str(function.get("name")), _canonical(function.get("arguments"))))
    return (message["role"], message.get("content") or "", tuple(calls))


def _canonical(arguments: Any) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except (TypeError, ValueError):
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
