"""Agent episodes on a rollout worker: an OpenAI-compatible endpoint per episode, batched
sampling, and the trajectories the record yields.

`play_agent_episodes` runs one agent function per start state (arl/agent.py) as asyncio tasks
in this process, each with its own `openai.AsyncOpenAI` client whose base URL is a path of
one HTTP server (aiohttp, bound to `rollout.endpoint_host`) that only that episode knows
(`/<random token>/v1`). Requests are sampled in rounds: a round starts when every live agent
is waiting for a completion (or has finished), and samples all of them in one `generate`
call, in episode order, with seed `seed + round`. An agent function that plays an env turn by
turn therefore gets exactly the samples of arl's own episode loop (arl/episode.py), and a
collect is reproducible whatever the timing of the agents' own code.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

from arl.agent import AgentResult, AgentTask, as_result
from arl.agent_record import AgentEpisode, Pinned, RequestError
from arl.episode import TIMED_OUT, ChatRenderer
from arl.protocols import RolloutEngine
from arl.types import SamplingParams, Trajectory, Turn

MAX_BODY_BYTES = 8 * 2**20  # a request body; larger ones get HTTP 413
MODEL_NAME = "arl-policy"
TIMED_OUT_FAILURE = "timed out"  # how a timed-out episode's failure begins


class _Rounds:
    """Batches the waiting requests of all live episodes into one generate call a round."""

    def __init__(self, engine: RolloutEngine, params: SamplingParams, live: int):
        self.engine, self.params, self.live = engine, params, live
        self.waiting: dict[int, tuple[list[int], asyncio.Future]] = {}
        self.round = 0
        self.error: BaseException | None = None

    def submit(self, index: int, prompt: list[int]) -> asyncio.Future:
        if index in self.waiting:
            raise RuntimeError(f"episode {index} already waits for a completion")
        future = asyncio.get_running_loop().create_future()
        self.waiting[index] = (prompt, future)
        self._maybe_run()
        return future

    def finished(self, index: int) -> None:
        """Agent `index` is done: a request it left waiting is dropped, and the others may
        all be waiting now."""
        self.live -= 1
        _, future = self.waiting.pop(index, (None, None))
        if future is not None and not future.done():
            future.cancel()
        self._maybe_run()

    def _maybe_run(self) -> None:
        if self.waiting and len(self.waiting) >= self.live:
            asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        if not self.waiting or len(self.waiting) < self.live:
            return  # already run by an earlier callback
        order = sorted(self.waiting)
        batch = [self.waiting.pop(i) for i in order]
        p = self.params
        params = SamplingParams(p.temperature, p.top_p, p.max_new_tokens, p.seed + self.round)
        self.round += 1
        try:  # blocking on purpose: every live agent is waiting for this call
            generations = self.engine.generate([prompt for prompt, _ in batch], params)
            if len(generations) != len(batch):
                raise RuntimeError(f"{len(generations)} generations for {len(batch)} prompts")
        except Exception as err:  # an engine failure fails the collect, not one episode
            self.error = err
            generations = [RuntimeError("the rollout engine failed")] * len(batch)
        for (_, future), generation in zip(batch, generations, strict=True):
            if future.done():  # cancelled meanwhile
                continue
            if isinstance(generation, BaseException):
                future.set_exception(generation)
            else:
                future.set_result(generation)


class _Clock:
    """An agent episode's own time: the time since it began, less the time it spent
    waiting for its completions (the engine's time, shared by every episode)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.waited = 0.0
        self.waiting_since: float | None = None

    def own(self) -> float:
        now = time.monotonic()
        waiting = now - self.waiting_since if self.waiting_since is not None else 0.0
        return now - self.started - self.waited - waiting

    def wait(self) -> None:
        self.waiting_since = time.monotonic()

    def resume(self) -> None:
        if self.waiting_since is not None:
            self.waited += time.monotonic() - self.waiting_since
            self.waiting_since = None


async def _within(run: asyncio.Future, clock: _Clock, limit_s: float) -> bool:
    """Wait for the agent's task `run`; False (and the task cancelled) once its own time
    passes `limit_s` (> 0; 0: no limit)."""
    while True:
        left = limit_s - clock.own() if limit_s > 0 else None
        if left is not None and left <= 0:
            run.cancel()
            return False
        done, _ = await asyncio.wait({run}, timeout=left)
        if done:
            return True


class _Endpoint:
    """The HTTP side: routes `/<token>/v1/chat/completions` to its episode's record."""

    def __init__(self, episodes: list[AgentEpisode], rounds: _Rounds):
        self.episodes, self.rounds = episodes, rounds
        self.token_of = [secrets.token_urlsafe(16) for _ in episodes]  # unguessable paths
        self.tokens = {token: i for i, token in enumerate(self.token_of)}
        self.busy: set[int] = set()
        self.closed: set[int] = set()  # episodes whose agent has returned
        self.clocks = [_Clock() for _ in episodes]

    async def chat(self, request: Any) -> Any:
        from aiohttp import web

        index = self.tokens.get(request.match_info["token"])
        if index is None:
            return _error(web, RequestError("no such episode", status=404))
        episode = self.episodes[index]
        if index in self.closed:
            return _error(web, RequestError("this episode's agent has returned", status=410))
        if index in self.busy:  # checked and taken before any await: no second way in
            episode.request_errors += 1
            return _error(web, RequestError("one request at a time per episode", status=409))
        self.busy.add(index)
        try:
            return await self._answer(web, request, index, episode)
        finally:
            self.busy.discard(index)

    async def _answer(self, web: Any, request: Any, index: int, episode: AgentEpisode) -> Any:
        try:
            body = json.loads(await request.text())
        except (ValueError, RecursionError):
            episode.request_errors += 1
            return _error(web, RequestError("the request body is not valid JSON"))
        if index in self.closed:
            return _error(web, RequestError("this episode's agent has returned", status=410))
        try:
            prompt = episode.prompt(body)
            self.clocks[index].wait()
            try:
                generation = await self.rounds.submit(index, prompt)
            finally:
                self.clocks[index].resume()
            return web.json_response(episode.complete(generation, MODEL_NAME))
        except RequestError as err:
            return _error(web, err)
        except (RuntimeError, asyncio.CancelledError) as err:
            return _error(web, RequestError(str(err) or "the episode ended", status=500))
        except Exception as err:  # a bug of arl's: the half-recorded turn is never trained on
            episode.failure = episode.failure or f"the endpoint failed: {type(err).__name__}"
            return _error(web, RequestError(episode.failure, status=500))

    async def models(self, request: Any) -> Any:
        from aiohttp import web

        if request.match_info["token"] not in self.tokens:
            return _error(web, RequestError("no such episode", status=404))
        return web.json_response({"object": "list", "data": [
            {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "arl"}]})


def _error(web: Any, err: RequestError) -> Any:
    """The OpenAI error body: the client raises it as BadRequestError (400) and friends."""
    return web.json_response({"error": {"message": err.message, "type": "invalid_request_error",
                                        "param": err.param, "code": None}}, status=err.status)


def play_agent_episodes(engine: RolloutEngine, renderer: ChatRenderer, agent: Callable,
                        tasks: Sequence[AgentTask], params: SamplingParams, max_turns: int,
                        host: str, timeout_s: float = 0.0) -> list[Trajectory]:
    """Play one agent episode per task; trajectories in task order (see the module
    docstring). An agent that raises, returns no usable result or made no request fails its
    episode only (`Trajectory.failure`); so does one whose own time (its time outside its
    completions) passes `timeout_s` (> 0): it is cancelled, and counted in
    `rollout/timed_out_episodes`. A failing engine raises."""
    return asyncio.run(_play(engine, renderer, agent, tasks, params, max_turns, host,
                             timeout_s))


async def _play(engine: RolloutEngine, renderer: ChatRenderer, agent: Callable,
                tasks: Sequence[AgentTask], params: SamplingParams, max_turns: int,
                host: str, timeout_s: float) -> list[Trajectory]:
    import httpx
    import openai
    from aiohttp import web

    pinned = Pinned(params.temperature, params.top_p, params.max_new_tokens, max_turns,
                    int(getattr(engine, "max_model_len", 0) or 0))
    episodes = [AgentEpisode(renderer, pinned, i) for i in range(len(tasks))]
    rounds = _Rounds(engine, params, len(tasks))
    endpoint = _Endpoint(episodes, rounds)
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/{token}/v1/chat/completions", endpoint.chat)
    app.router.add_get("/{token}/v1/models", endpoint.models)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.bind((host, 0))
    await web.SockSite(runner, sock).start()
    port = sock.getsockname()[1]
    limits = httpx.Limits(max_connections=len(tasks) + 1, max_keepalive_connections=len(tasks))
    http = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(None))
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"

    async def one(i: int, token: str) -> tuple[AgentResult | None, str | None]:
        client = openai.AsyncOpenAI(base_url=f"{url}/{token}/v1", api_key="arl-episode",
                                    http_client=http, max_retries=0)
        run = asyncio.ensure_future(agent(client, tasks[i]))
        try:
            if not await _within(run, endpoint.clocks[i], timeout_s):
                return None, (f"{TIMED_OUT_FAILURE}: the agent function took over "
                              f"rollout.episode_timeout_s ({timeout_s:g} s) of its own time")
            return as_result(run.result()), None
        except Exception as err:  # an agent's bug or a refused request: this episode fails
            return None, f"agent raised {type(err).__name__}: {err}"[:200].replace("\n", " ")
        finally:
            endpoint.closed.add(i)
            rounds.finished(i)

    try:
        outcomes = await asyncio.gather(*(one(i, token)
                                          for i, token in enumerate(endpoint.token_of)))
    finally:
        await http.aclose()
        await runner.cleanup()
    if rounds.error is not None:
        raise rounds.error
    return [_trajectory(episode, task, *outcome, engine.version)
            for episode, task, outcome in zip(episodes, tasks, outcomes, strict=True)]


def _trajectory(episode: AgentEpisode, task: AgentTask, result: AgentResult | None,
                failure: str | None, version: int) -> Trajectory:
    """The episode's record as a Trajectory, with its result's rewards on its turns."""
    ids, mask, logprobs = episode.result_arrays()
    turns = episode.turns
    failure = episode.failure or failure
    if failure is None and not turns:
        failure = "the agent made no request"
    if result is not None and failure is None:
        rewards = result.turn_rewards or (0.0,) * (len(turns) - 1) + (result.reward,)
        states = result.turn_states or (None,) * len(turns)
        if len(rewards) != len(turns) or len(states) != len(turns):
            failure = (f"AgentResult has {len(rewards)} turn rewards and {len(states)} turn "
                       f"states for {len(turns)} completions")
        else:
            turns = [Turn(t.start, t.end, float(r), s)
                     for t, r, s in zip(turns, rewards, states, strict=True)]
    reward = result.reward if result is not None and failure is None else 0.0
    metrics = {"rollout/prefix_splits": float(episode.prefix_splits),
               "rollout/agent_request_errors": float(episode.request_errors),
               TIMED_OUT: float(failure is not None and failure.startswith(TIMED_OUT_FAILURE))}
    if result is not None:
        metrics.update({f"agent/{k}": float(v) for k, v in result.metrics.items()})
    return Trajectory(
        token_ids=ids, loss_mask=mask, sampler_logprobs=logprobs, reward=float(reward),
        group_id=task.group_id, policy_version=version, num_turns=len(turns),
        num_tool_calls=episode.tool_calls, num_invalid_calls=episode.invalid_calls,
        outcome=result.outcome if result is not None and failure is None else None,
        failure=failure, row_starts=tuple(episode.row_starts),
        turns=tuple(turns), metrics=metrics, messages=episode.messages,
    )
