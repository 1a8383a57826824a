"""Typed records that cross module and process boundaries, and the glossary they use.

Glossary (one name per concept in code, config and metrics; see docs/ARCHITECTURE.md):
  group_size        trajectories per start state (G)
  advantages        group-normalised rewards, one per trajectory
  logprobs          per-token log-prob under the weights being trained, [B, T]
  old_logprobs      the same tokens under the weights at the start of a learner step
  sampler_logprobs  what the rollout engine reported while sampling
  loss_mask         1 = token sampled by the policy; 0 = prompt, tool result, opponent, padding
  policy_version    the learner step whose weights produced a trajectory
  clip_low/high     GSPO's epsilon (paper: 3e-4 / 4e-4)
  max_staleness     the largest allowed learner_version - policy_version

Records are frozen dataclasses. Dicts appear only for JSON-shaped payloads (tool arguments,
JSON schemas) and for metrics.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Message:
    """One chat message. `role` is system | user | assistant | tool."""

    role: str
    content: str

    def as_dict(self) -> dict[str, str]:
        """The shape chat templates expect."""
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class ToolSchema:
    """A tool the model may call. `parameters` is a JSON-schema object with `properties`,
    `required` and (implicitly) no additional properties."""

    name: str
    description: str
    parameters: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """OpenAI/Hermes function format, as chat templates render it."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class ToolCall:
    """A tool call that parsed and validated against its schema."""

    name: str
    arguments: dict[str, Any]


class ToolCallErrorKind(str, enum.Enum):
    """Why a model turn did not yield a valid tool call."""

    MISSING = "missing"  # no <tool_call> block at all
    TRUNCATED = "truncated"  # cut off by max_new_tokens before the turn ended
    MALFORMED = "malformed"  # tags unbalanced, or the body is not strict JSON
    TOO_LARGE = "too_large"  # body longer or nested deeper than the caps
    MULTIPLE = "multiple"  # more than one call in one turn
    TRAILING_TEXT = "trailing_text"  # text after the call: a turn ends at the call
    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"  # wrong keys, types or values for the schema


@dataclass(frozen=True)
class ToolCallError:
    """A turn that did not yield a valid tool call; envs turn it into an observation."""

    kind: ToolCallErrorKind
    message: str


ParsedTurn = ToolCall | ToolCallError


@dataclass(frozen=True)
class EnvReset:
    """What an episode starts with: the opening messages and the tools on offer."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...]


RESULTS = ("win", "draw", "loss", "invalid")


@dataclass(frozen=True)
class Outcome:
    """How an episode ended, as its env reports it on the last step.

    `kind` is one of the env's own outcome names (`EnvSpec.outcomes`), logged as
    `rollout/outcome_<kind>`. `result` places it on the scale every game shares: win | draw |
    loss | invalid (an invalid turn ended the episode), or None where none applies (e.g. a
    scored single move that neither wins nor fails). `actions` are the agent's actions in
    order as integers, where the env has numbered actions (for the action histogram and
    entropy); `()` otherwise.
    """

    kind: str
    result: str | None = None
    actions: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.result is not None and self.result not in RESULTS:
            raise ValueError(f"Outcome.result must be one of {RESULTS} or None, "
                             f"got {self.result!r}")


@dataclass(frozen=True)
class EnvStep:
    """The env's answer to one turn.

    `messages` are appended to the conversation (tool results, opponent replies); they are
    never trained on. `reward` is this turn's (the episode's is their sum). `outcome` says
    how the episode ended, on the step that ends it (None on the others). `turn_state`
    optionally names the state the turn was played in (e.g. the position and who is to
    move): turns of different episodes with the same name share a baseline under
    `learner.advantage.level: turn`. `restart`, on a step the episode goes on from, asks the next
    turn in a new conversation that opens with it instead of one extended by `messages`
    (e.g. a game that shows each turn the current board alone): the trajectory's next
    training row begins there (`Trajectory.row_starts`).
    """

    messages: tuple[Message, ...]
    reward: float
    terminated: bool
    truncated: bool
    outcome: Outcome | None = None
    turn_state: str | None = None
    restart: EnvReset | None = None


@dataclass(frozen=True)
class Turn:
    """One model turn of an episode: where its sampled ids are in the trajectory, the
    reward the env gave for it, and the state it was played in (EnvStep.turn_state)."""

    start: int  # token_ids[start:end] are this turn's sampled ids
    end: int
    reward: float
    state: str | None = None


@dataclass(frozen=True)
class Trajectory:
    """One episode, token-exact.

    token_ids         [T] int32: prompt ids, then sampled and env ids in the order they occurred
    loss_mask         [T] int8: 1 only where the rollout engine sampled the token
    sampler_logprobs  [T] float32: sampler's log-prob where loss_mask == 1, else 0
    failure           None, or why the episode failed (the env raised, or a reward or a
                      sampler log-prob was not finite): its group must not be trained on
    messages          the conversation as messages (the env's last reply included), for
                      transcripts; rollout workers drop it before trajectories travel
    row_starts        where in token_ids a new training row begins: an agent episode whose
                      conversation stopped extending its recorded prefix (arl/agent.py), or
                      an env's episode whose steps restart the conversation
                      (EnvStep.restart), is several rows back to back; () for one row. The
                      learner trains each row as a sequence of its own with weight 1/rows
                      (arl/learner/collate.py)
    metrics           per-episode counts and an agent's own metrics, by metric name
    """

    token_ids: np.ndarray
    loss_mask: np.ndarray
    sampler_logprobs: np.ndarray
    reward: float
    group_id: int
    policy_version: int
    num_turns: int
    num_tool_calls: int
    num_invalid_calls: int
    outcome: Outcome | None = None  # the env's last step's, None if it never said
    failure: str | None = None
    episode_id: int = -1  # unique in a run: group_id * group_size + index in the group
    messages: tuple[Message, ...] = ()
    turns: tuple[Turn, ...] = ()  # one per model turn, in order
    row_starts: tuple[int, ...] = ()
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def rows(self) -> list[slice]:
        """The training rows of token_ids, in order (one for most episodes)."""
        bounds = [0, *self.row_starts, len(self.token_ids)]
        return [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    @property
    def response_len(self) -> int:
        """Tokens the policy sampled in this episode."""
        return int(self.loss_mask.sum())

    def summary(self, transcript: str | None = None) -> EpisodeSummary:
        """The array-free facts the driver needs for advantages and metrics; with a
        `transcript` (the decoded token ids), also the conversation as messages."""
        return EpisodeSummary(
            reward=self.reward,
            group_id=self.group_id,
            policy_version=self.policy_version,
            response_len=self.response_len,
            num_turns=self.num_turns,
            num_tool_calls=self.num_tool_calls,
            num_invalid_calls=self.num_invalid_calls,
            outcome=self.outcome,
            failure=self.failure,
            episode_id=self.episode_id,
            transcript=transcript,
            messages=self.messages if transcript is not None else (),
            turns=self.turns,
            metrics=self.metrics,
        )


@dataclass(frozen=True)
class EpisodeSummary:
    """A trajectory without its arrays: small enough to fetch to the driver every step."""

    reward: float
    group_id: int
    policy_version: int
    response_len: int
    num_turns: int
    num_tool_calls: int
    num_invalid_calls: int
    outcome: Outcome | None = None  # see Trajectory
    failure: str | None = None  # see Trajectory
    episode_id: int = -1  # see Trajectory
    transcript: str | None = None  # the decoded conversation, when the driver asked for it
    messages: tuple[Message, ...] = ()  # the same conversation as messages (with a transcript)
    turns: tuple[Turn, ...] = ()  # see Trajectory
    metrics: dict[str, float] = field(default_factory=dict)  # see Trajectory


@dataclass(frozen=True)
class Histogram:
    """A metric that is a distribution: `counts[i]` values fell in [edges[i], edges[i+1]).

    metrics.jsonl stores it as {"edges": [...], "counts": [...]}; wandb as a histogram.
    """

    edges: tuple[float, ...]
    counts: tuple[int, ...]

    @staticmethod
    def of(values: Any, bins: Any = 32) -> Histogram:
        """numpy.histogram of `values` (`bins`: a count or the edges)."""
        counts, edges = np.histogram(np.asarray(values, dtype=np.float64), bins=bins)
        return Histogram(tuple(float(e) for e in edges), tuple(int(c) for c in counts))

    def as_json(self) -> dict[str, list]:
        return {"edges": list(self.edges), "counts": list(self.counts)}


@dataclass(frozen=True)
class SamplingParams:
    """How a rollout engine samples one turn. `seed` makes a generate call reproducible."""

    temperature: float
    top_p: float
    max_new_tokens: int
    seed: int


@dataclass(frozen=True)
class Generation:
    """One sampled turn.

    token_ids         [n] int32: the sampled ids, including the stop id when `finished`
    sampler_logprobs  [n] float32: log-probs of those ids under softmax(logits / temperature)
    finished          True if the turn ended on a stop id; False if cut off by max_new_tokens
    """

    token_ids: np.ndarray
    sampler_logprobs: np.ndarray
    finished: bool
