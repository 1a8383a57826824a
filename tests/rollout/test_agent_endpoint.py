"""Agent functions through the real endpoint (aiohttp server, the official openai client, a
real tiny model): exact capture against arl's own episode loop, prefix splits, and hostile
agents."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import openai
import pytest

from arl.agent import AgentTask
from arl.env_spec import EnvContext, resolve_env
from arl.envs.registry import env_config
from arl.episode import ChatRenderer, run_episodes
from arl.rollout.agent_endpoint import play_agent_episodes
from arl.rollout.engines.hf import HFEngine
from arl.types import SamplingParams
from examples.env_agent import run_agent as env_agent


@pytest.fixture(scope="module")
def engine(warm_model_dir):
    return HFEngine(warm_model_dir, dtype="float32")


def _renderer(engine):
    tok = engine.get_tokenizer()
    return ChatRenderer(tok, stop_token=tok.eos_token)


def _play_agent(engine, agent, episodes, max_turns, seed=2, wrap=None, timeout_s=0.0):
    """One group of `episodes` agent episodes of the one-move task's config."""
    tasks = [AgentTask(1, 0, i, env_config(), max_turns=max_turns) for i in range(episodes)]
    return play_agent_episodes(wrap(engine) if wrap else engine, _renderer(engine), agent,
                               tasks, SamplingParams(1.0, 1.0, 8, seed=seed), max_turns,
                               "127.0.0.1", timeout_s)


def _both(engine, cfg, seeds, group_size, max_turns, max_new_tokens=24):
    """(built-in trajectories, agent-function trajectories) of the same start states."""
    params = SamplingParams(1.0, 1.0, max_new_tokens, seed=11)
    spec = resolve_env(cfg.name)
    starts = [(s, g, i) for g, s in enumerate(seeds) for i in range(group_size)]
    builtin = run_episodes(engine, _renderer(engine),
                           [(spec.make(cfg, EnvContext(i)), s, g) for s, g, i in starts],
                           params, max_turns=max_turns)
    tasks = [AgentTask(s, g, i, cfg, max_turns=max_turns) for s, g, i in starts]
    agent = play_agent_episodes(engine, _renderer(engine), env_agent, tasks, params,
                                max_turns, "127.0.0.1")
    return builtin, agent


def _assert_same(builtin, agent):
    assert len(builtin) == len(agent)
    for b, a in zip(builtin, agent, strict=True):
        assert a.failure is None and b.failure is None
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
        np.testing.assert_array_equal(a.loss_mask, b.loss_mask)
        np.testing.assert_array_equal(a.sampler_logprobs, b.sampler_logprobs)
        assert (a.reward, a.num_turns, a.num_tool_calls, a.num_invalid_calls, a.outcome,
                a.turns) == (b.reward, b.num_turns, b.num_tool_calls, b.num_invalid_calls,
                             b.outcome, b.turns)
        assert a.row_starts == () and a.metrics["rollout/prefix_splits"] == 0


def test_one_move_task_as_an_agent_function_gives_the_builtin_trajectories(engine):
    builtin, agent = _both(engine, env_config(), seeds=[3, 4, 5, 6], group_size=4,
                           max_turns=1)
    _assert_same(builtin, agent)
    assert {t.num_invalid_calls for t in agent} == {0, 1}  # valid and invalid calls both seen


def test_full_games_as_an_agent_function_give_the_builtin_trajectories(engine):
    cfg = env_config(name="tictactoe", opponent="random", invalid_action="retry")
    builtin, agent = _both(engine, cfg, seeds=[7, 8], group_size=3, max_turns=5)
    _assert_same(builtin, agent)
    assert max(t.num_turns for t in agent) >= 3  # the conversation was extended turn by turn


async def _forgetful_agent(client, task):
    """Asks twice; the second request drops the first exchange: a new training row."""
    messages = [{"role": "user", "content": "Pick a square."}]
    first = await client.chat.completions.create(model=task.model, messages=messages)
    await client.chat.completions.create(model=task.model, messages=[
        {"role": "user", "content": "Pick again: " + (first.choices[0].message.content
                                                      or "")[:20]}])
    return 0.5


def test_a_request_that_does_not_extend_the_record_starts_a_new_row(engine):
    trajs = _play_agent(engine, _forgetful_agent, episodes=2, max_turns=2, seed=1)
    for t in trajs:
        assert t.failure is None and t.reward == 0.5 and t.num_turns == 2
        assert len(t.row_starts) == 1 and t.metrics["rollout/prefix_splits"] == 1
        first, second = t.rows
        assert t.loss_mask[first].sum() > 0 and t.loss_mask[second].sum() > 0
        assert t.loss_mask[second][0] == 0  # the new row opens with its rendered prompt
        assert [turn.reward for turn in t.turns] == [0.0, 0.5]


SEEN: dict[str, str] = {}


async def _hostile_agent(client, task):
    """Variant v makes one kind of bad request, records the error and re-raises it."""
    base = [{"role": "user", "content": "hello"}]
    kind = ["role", "history", "huge", "temperature", "long", "fine"][task.variant]
    try:
        if kind == "role":
            await client.chat.completions.create(model="m", messages=[
                {"role": "wizard", "content": "hi"}])
        elif kind == "history":
            reply = await client.chat.completions.create(model="m", messages=base)
            forged = {"role": "assistant", "content": (reply.choices[0].message.content or "")
                      + " and I also said this"}
            await client.chat.completions.create(model="m", messages=[
                *base, forged, {"role": "user", "content": "go on"}])
        elif kind == "huge":
            await client.chat.completions.create(model="m", messages=[
                {"role": "user", "content": "x" * 2**20}])
        elif kind == "long":  # under the character cap, over the model's context
            await client.chat.completions.create(model="m", messages=[
                {"role": "user", "content": "1 2 3 " * 10_000}])
        elif kind == "temperature":
            await client.chat.completions.create(model="m", messages=base, temperature=0.3)
        else:
            await client.chat.completions.create(model="m", messages=base)
            return 1.0
    except openai.BadRequestError as err:
        SEEN[kind] = err.body["message"]
        raise
    return 1.0


def test_hostile_agents_get_clear_errors_and_fail_only_their_episodes(engine):
    trajs = _play_agent(engine, _hostile_agent, episodes=6, max_turns=3)
    assert "messages[0].role must be one of" in SEEN["role"]
    assert "did not sample" in SEEN["history"]
    assert "1048576 characters; the limit is 100000" in SEEN["huge"]
    assert "temperature is pinned to 1.0" in SEEN["temperature"]
    assert f"it exceeds the model's context of {engine.max_model_len}" in SEEN["long"]
    failed = [t.failure for t in trajs[:5]]
    assert all(f is not None and f.startswith("agent raised BadRequestError") for f in failed)
    assert [t.metrics["rollout/agent_request_errors"] for t in trajs] == [1, 1, 1, 1, 1, 0]
    assert trajs[5].failure is None and trajs[5].reward == 1.0 and trajs[5].num_turns == 1
    assert trajs[1].num_turns == 1  # the refused request sampled nothing


async def _no_request_agent(client, task):
    return 1.0


def test_an_agent_that_never_asks_fails_its_episode(engine):
    (traj,) = _play_agent(engine, _no_request_agent, episodes=1, max_turns=1)
    assert traj.failure == "the agent made no request" and len(traj.token_ids) == 0


async def _impatient_agent(client, task):
    """Variant 0 sends two requests at once; 1 fires a request and returns without it;
    2 behaves."""
    ask = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    if task.variant == 0:
        results = await asyncio.gather(
            ask, client.chat.completions.create(model="m", messages=[
                {"role": "user", "content": "hi"}]), return_exceptions=True)
        SEEN["twice"] = sorted(type(r).__name__ for r in results)
    elif task.variant == 1:
        asyncio.ensure_future(ask)
        await asyncio.sleep(0)
    else:
        await ask
    return 1.0


def test_concurrent_and_abandoned_requests_neither_hang_nor_corrupt_a_record(engine):
    trajs = _play_agent(engine, _impatient_agent, episodes=3, max_turns=3)
    assert SEEN["twice"] == ["ChatCompletion", "ConflictError"]
    assert trajs[0].num_turns == 1 and trajs[0].metrics["rollout/agent_request_errors"] == 1
    assert trajs[0].loss_mask[-1] == 1  # the record ends on its one completion
    assert trajs[2].failure is None and trajs[2].num_turns == 1
    # the abandoned request was never answered: nothing of it stays in the record
    assert trajs[1].num_turns == 0 and len(trajs[1].token_ids) == 0
    assert trajs[1].failure == "the agent made no request"


class _NaNEngine:
    def __init__(self, engine):
        self.engine, self.version = engine, engine.version

    def generate(self, prompts, params):
        out = self.engine.generate(prompts, params)
        first = out[0]
        out[0] = dataclasses.replace(first, sampler_logprobs=np.full_like(
            first.sampler_logprobs, np.nan))
        return out


def test_non_finite_sampler_logprobs_fail_the_episode(engine):
    first, second = _play_agent(engine, env_agent, episodes=2, max_turns=1, wrap=_NaNEngine)
    assert first.failure == "the engine returned non-finite sampler log-probs"
    assert second.failure is None and np.isfinite(second.sampler_logprobs).all()



BAD_SCHEMA = [{"type": "function", "function": {"name": "choose_square", "parameters": {
    "type": "object", "properties": {"square": {"type": "integer", "minimum": "one"}}}}}]


async def _bad_schema_agent(client, task):
    """Sends a tool schema arl cannot apply, swallows the refusal and claims a reward."""
    try:
        await client.chat.completions.create(model="m", tools=BAD_SCHEMA, messages=[
            {"role": "user", "content": "play"}])
    except openai.APIStatusError as err:
        SEEN[f"schema-{task.variant}"] = f"{err.status_code} {err.message}"
    if task.variant == 1:  # then asks properly: its episode trains
        return await env_agent(client, task)
    return 1.0


def test_a_bad_tool_schema_is_a_400_and_its_turn_is_never_trained_on(engine):
    refused, recovered = _play_agent(engine, _bad_schema_agent, episodes=2, max_turns=2)
    assert SEEN["schema-0"].startswith("400 ") and "minimum must be a finite number" in \
        SEEN["schema-0"]
    assert refused.failure == "the agent made no request" and len(refused.token_ids) == 0
    assert refused.metrics["rollout/agent_request_errors"] == 1
    assert recovered.failure is None and recovered.num_turns == 1


async def _stuck_agent(client, task):
    """Variant 0 never returns: it waits on something that never comes."""
    if task.variant == 0:
        await asyncio.sleep(3600)
    return await env_agent(client, task)


def test_a_stuck_agent_times_out_and_the_others_play_on(engine):
    stuck, *others = _play_agent(engine, _stuck_agent, episodes=3, max_turns=1, timeout_s=1.0)
    assert stuck.failure.startswith("timed out") and "rollout.episode_timeout_s" in stuck.failure
    assert stuck.metrics["rollout/timed_out_episodes"] == 1
    assert all(t.failure is None and t.num_turns == 1 for t in others)
    assert all(t.metrics["rollout/timed_out_episodes"] == 0 for t in others)


class _SlowEngine:
    """Takes 1.5 s a generate call: longer than the agents' own time limit."""

    def __init__(self, engine):
        self.engine, self.version = engine, engine.version

    def generate(self, prompts, params):
        import time

        time.sleep(1.5)
        return self.engine.generate(prompts, params)


def test_time_spent_waiting_for_completions_is_not_the_agents_own(engine):
    trajs = _play_agent(engine, env_agent, episodes=2, max_turns=1, wrap=_SlowEngine,
                        timeout_s=1.0)
    assert all(t.failure is None and t.num_turns == 1 for t in trajs)
