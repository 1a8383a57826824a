"""The episode loop is token-exact: sampled ids survive unchanged, env ids are never trained."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from arl.envs.registry import env_config, make_env
from arl.episode import ChatRenderer, parse_turn, run_episodes
from arl.rollout.engines.hf import HFEngine
from arl.types import Message, SamplingParams

RETRY_GAME = env_config(name="tictactoe", opponent="random", invalid_action="retry", max_retries=2)


class RecordingEngine:
    """Passes every call through to a real engine and keeps what went in and came out."""

    def __init__(self, engine: HFEngine):
        self.engine = engine
        self.calls: list[tuple[list[list[int]], list]] = []

    @property
    def version(self) -> int:
        return self.engine.version

    def generate(self, prompts, params):
        out = self.engine.generate(prompts, params)
        self.calls.append(([list(p) for p in prompts], out))
        return out

    def update_weights(self, weights, version):
        self.engine.update_weights(weights, version)


def _segments(mask: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, end, value) runs of equal mask values."""
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((start, i, int(mask[start])))
            start = i
    return runs


def _play(model_dir, env_cfg, seeds, max_new_tokens=24, max_turns=6, timeout_s=0.0):
    engine = RecordingEngine(HFEngine(model_dir, dtype="float32"))
    tok = engine.engine.get_tokenizer()
    renderer = ChatRenderer(tok, stop_token=tok.eos_token)
    starts = [(make_env(env_cfg), s, i) for i, s in enumerate(seeds)]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens, seed=7)
    return engine, renderer, run_episodes(engine, renderer, starts, params, max_turns=max_turns,
                                          timeout_s=timeout_s)


@pytest.mark.parametrize("max_new_tokens", [24, 3])
def test_sampled_ids_survive_and_env_ids_are_masked(warm_model_dir, max_new_tokens):
    engine, renderer, trajs = _play(warm_model_dir, RETRY_GAME, range(6), max_new_tokens)
    assert any(t.num_turns > 1 for t in trajs), "need multi-turn episodes"
    sampled = {i: [] for i in range(len(trajs))}
    # Turn k goes to the episodes still live, in order: those that played more than k turns.
    for k, (prompts, generations) in enumerate(engine.calls):
        live = [i for i, t in enumerate(trajs) if t.num_turns > k]
        assert len(live) == len(prompts)
        for i, prompt, gen in zip(live, prompts, generations, strict=True):
            t = trajs[i]
            end = len(prompt) + len(gen.token_ids)
            # The prompt is exactly the trajectory so far, and the sampled ids follow unchanged.
            assert t.token_ids[: len(prompt)].tolist() == prompt
            assert t.token_ids[len(prompt) : end].tolist() == gen.token_ids.tolist()
            np.testing.assert_array_equal(t.sampler_logprobs[len(prompt) : end],
                                          gen.sampler_logprobs)
            sampled[i].extend(gen.token_ids.tolist())
    for i, t in enumerate(trajs):
        # Exactly the sampled ids carry mask 1; everything else (prompt, env replies) is 0.
        assert t.token_ids[t.loss_mask == 1].tolist() == sampled[i]
        assert (t.sampler_logprobs[t.loss_mask == 0] == 0).all()
        runs = [v for _, _, v in _segments(t.loss_mask)]
        assert runs[0] == 0 and runs[-1] == 1 and runs.count(1) == t.num_turns


def test_trajectory_decodes_to_the_rendered_conversation(warm_model_dir):
    """Replaying the env independently and rendering the whole chat gives the same text."""
    _, renderer, trajs = _play(warm_model_dir, RETRY_GAME, range(6))
    tok = renderer.tokenizer
    for seed, t in enumerate(trajs):
        env = make_env(RETRY_GAME)
        start = env.reset(seed)
        messages = list(start.messages)
        for a, b, value in _segments(t.loss_mask):
            if value != 1:
                continue
            ids = t.token_ids[a:b]
            finished = ids[-1] == renderer.stop_id
            text = tok.decode(ids[:-1] if finished else ids, skip_special_tokens=False)
            messages.append(Message("assistant", text))
            step = env.step(parse_turn(text, bool(finished), start.tools))
            messages.extend(step.messages)
        rendered = tok.apply_chat_template(
            [m.as_dict() for m in messages], tools=[x.as_dict() for x in start.tools],
            tokenize=False,
        )
        decoded = tok.decode(t.token_ids.tolist(), skip_special_tokens=False)
        # The last assistant turn is the final one: the env's closing reply is not appended.
        assert rendered.startswith(decoded.removesuffix(tok.eos_token)), (decoded, rendered)


def test_cut_off_turn_is_never_a_move(warm_model_dir):
    _, _, trajs = _play(warm_model_dir, env_config(), range(8), max_new_tokens=2)
    for t in trajs:
        assert t.reward == -1.0 and t.num_invalid_calls == 1
        assert t.outcome.kind == "invalid_call" and "(truncated)" in t.messages[-1].content


def test_same_seed_same_batch(warm_model_dir):
    """Also with the env's calls bounded in time (on a helper thread): the same episodes."""
    _, _, a = _play(warm_model_dir, RETRY_GAME, range(4))
    _, _, b = _play(warm_model_dir, RETRY_GAME, range(4), timeout_s=600.0)
    for x, y in zip(a, b, strict=True):
        assert x.token_ids.tolist() == y.token_ids.tolist() and x.reward == y.reward
        assert x.num_turns == y.num_turns and x.outcome == y.outcome


class _BrokenEnv:
    """Wraps a real env; raises in reset or in the second step, as a buggy env would."""

    def __init__(self, env, fail_in: str):
        self.env, self.fail_in, self.steps = env, fail_in, 0

    def reset(self, seed):
        if self.fail_in == "reset":
            raise KeyError("no such board")
        return self.env.reset(seed)

    def step(self, turn):
        self.steps += 1
        if self.fail_in == "step" and self.steps == 2:
            raise RuntimeError("opponent crashed\nwith a traceback")
        result = self.env.step(turn)
        if self.fail_in == "reward":
            return dataclasses.replace(result, reward=float("nan"))
        return result


class _NaNEngine:
    """A real engine whose first sequence of its first batch comes back with NaN log-probs."""

    def __init__(self, engine):
        self.engine, self.calls = engine, 0

    @property
    def version(self):
        return self.engine.version

    def generate(self, prompts, params):
        out = self.engine.generate(prompts, params)
        self.calls += 1
        if self.calls > 1:
            return out
        first = out[0]
        nan = np.full_like(first.sampler_logprobs, np.nan)
        return [dataclasses.replace(first, sampler_logprobs=nan), *out[1:]]


def test_env_exceptions_fail_only_their_episode(warm_model_dir):
    engine = HFEngine(warm_model_dir, dtype="float32")
    tok = engine.get_tokenizer()
    renderer = ChatRenderer(tok, stop_token=tok.eos_token)
    starts = [(_BrokenEnv(make_env(RETRY_GAME), fail), s, s)
              for s, fail in enumerate(["reset", "step", "never", "never"])]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=24, seed=3)
    trajs = run_episodes(engine, renderer, starts, params, max_turns=6)
    assert trajs[0].failure == "env.reset raised KeyError: 'no such board'"
    assert len(trajs[0].token_ids) == 0 and trajs[0].summary().failure == trajs[0].failure
    broken = trajs[1]  # no tictactoe game ends after one turn (with retries, not even invalid)
    assert broken.num_turns == 2
    assert broken.failure == "env.step raised RuntimeError: opponent crashed with a traceback"
    assert all(t.failure is None and t.num_turns >= 1 for t in trajs[2:])


class _StuckEnv:
    """Wraps a real env; its reset or second step never answers: it sleeps (waiting on
    something that never comes) or spins (a loop that never ends) until `release` is set,
    which the test does at its end."""

    def __init__(self, env, stuck_in: str, release):
        self.env, self.stuck_in, self.release, self.steps = env, stuck_in, release, 0

    def _hang(self):
        if self.stuck_in.endswith("spin"):
            while not self.release.is_set():
                pass
        self.release.wait()

    def reset(self, seed):
        if self.stuck_in == "reset":
            self._hang()
        return self.env.reset(seed)

    def step(self, turn):
        self.steps += 1
        if self.stuck_in.startswith("step") and self.steps == 2:
            self._hang()
        return self.env.step(turn)


def test_an_env_that_never_answers_times_out_and_the_others_play_on(warm_model_dir):
    import threading

    engine = HFEngine(warm_model_dir, dtype="float32")
    tok = engine.get_tokenizer()
    renderer = ChatRenderer(tok, stop_token=tok.eos_token)
    release = threading.Event()
    starts = [(_StuckEnv(make_env(RETRY_GAME), stuck, release), s, s)
              for s, stuck in enumerate(["reset", "step", "step-spin", "never", "never"])]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=24, seed=3)
    try:
        trajs = run_episodes(engine, renderer, starts, params, max_turns=6, timeout_s=1.0)
    finally:
        release.set()  # the abandoned calls may end now
    assert trajs[0].failure.startswith("env.reset timed out") and len(trajs[0].token_ids) == 0
    for stuck in trajs[1:3]:
        assert stuck.failure.startswith("env.step timed out") and stuck.num_turns == 2
        assert "rollout.episode_timeout_s (1 s)" in stuck.failure
    assert [t.metrics["rollout/timed_out_episodes"] for t in trajs] == [1, 1, 1, 0, 0]
    assert all(t.failure is None and t.outcome is not None for t in trajs[3:])


def test_non_finite_rewards_and_logprobs_fail_their_episode(warm_model_dir):
    engine = HFEngine(warm_model_dir, dtype="float32")
    tok = engine.get_tokenizer()
    renderer = ChatRenderer(tok, stop_token=tok.eos_token)
    starts = [(_BrokenEnv(make_env(RETRY_GAME), fail), s, s)
              for s, fail in enumerate(["never", "reward", "never"])]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=24, seed=3)
    trajs = run_episodes(_NaNEngine(engine), renderer, starts, params, max_turns=6)
    assert trajs[0].failure == "the engine returned non-finite sampler log-probs"
    assert trajs[1].failure == "env.step returned a non-finite reward (nan)"
    assert trajs[1].reward == 0.0 and trajs[1].num_turns == 1
    assert trajs[2].failure is None and np.isfinite(trajs[2].sampler_logprobs).all()


def test_every_turn_is_recorded_with_its_span_reward_and_state(warm_model_dir):
    from arl.envs.registry import env_config
    from arl.episode import ChatRenderer, run_episodes
    from arl.rollout.engines.hf import HFEngine
    from arl.types import SamplingParams

    engine = HFEngine(warm_model_dir, dtype="float32")
    renderer = ChatRenderer(engine.get_tokenizer(), engine.get_tokenizer().eos_token)
    cfg = env_config(name="tictactoe", opponent="random", invalid_action="retry",
                    reward_move_best=0.1)
    starts = [(make_env(cfg), 7, 0), (make_env(cfg), 8, 1)]
    for traj in run_episodes(engine, renderer, starts, SamplingParams(1.0, 1.0, 24, 3), 5):
        assert len(traj.turns) == traj.num_turns >= 1
        assert sum(t.reward for t in traj.turns) == pytest.approx(traj.reward)
        sampled = [i for t in traj.turns for i in range(t.start, t.end)]
        assert sampled == np.flatnonzero(traj.loss_mask).tolist()  # spans = the mask tokens
        assert all(t.state is not None and t.state.endswith(("/X", "/O")) for t in traj.turns)
