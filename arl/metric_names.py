"""What every metric key means: the glossary the documentation's metrics page is generated
from (arl/app/reference.py). A test trains a few steps and fails on any key a run writes
that no entry here matches; `<name>` stands for a part of a key that varies."""

from __future__ import annotations

import re

GLOSSARY: dict[str, str] = {
    "step": "the learner step the row belongs to (0-based)",
    # rollout/
    "rollout/reward_mean": "mean episode reward of the step's trained-on groups' first "
                           "`groups_per_step` groups (the curve the demo is judged by)",
    "rollout/reward_std": "standard deviation of those episodes' rewards",
    "rollout/response_len": "mean tokens the policy sampled per episode",
    "rollout/turns_per_episode": "mean model turns per episode",
    "rollout/tool_calls_per_episode": "mean well-formed tool calls per episode",
    "rollout/invalid_tool_call_rate": "share of turns whose reply was not one valid tool call "
                                      "(malformed JSON, wrong tool or arguments, trailing "
                                      "text, cut off by max_new_tokens)",
    "rollout/action_entropy": "entropy (nats) of the chosen actions over the step's episodes",
    "rollout/action_hist": "histogram of the chosen actions (the integers the env reports)",
    "rollout/outcome_<name>": "share of episodes that ended with this outcome kind (every kind "
                              "the env declares, 0 when absent)",
    "rollout/zero_variance_groups": "share of groups whose G rewards are all equal (they "
                                    "teach GSPO nothing)",
    "rollout/sampler_logprob_gap": "mean |sampler log-prob - learner log-prob| per sampled "
                                   "token: how far the engine's numbers are from the learner's",
    "turns/reward_t<name>": "multi-turn episodes: mean reward of turn t (1-based, up to 10) over "
                            "the episodes that played it",
    "turns/ended_t<name>": "share of episodes that ended at turn t",
    "turns/won_t<name>": "share of episodes that ended at turn t with a win",
    "turns/states_per_group_turn": "mean number of distinct states among a group's episodes at "
                                   "one turn index (1: all in the same state)",
    "turns/nonzero_step_advantage": "turn-level credit: share of named turns whose step "
                                    "advantage is not zero (the turns the step term teaches)",
    "rollout/sampler_logprob_gap_max": "largest |sampler log-prob - learner log-prob| of a "
                                       "sampled token in the step",
    "rollout/failed_episodes": "episodes that failed (an env raised, a non-finite reward, a "
                               "timeout); their groups are not trained on",
    "rollout/timed_out_episodes": "episodes cut off by `rollout.episode_timeout_s`",
    "rollout/masked_groups": "groups left out of the learner step because an episode failed",
    "rollout/actor_restarts": "rollout workers rebuilt (new processes) in the run so far",
    "rollout/env_actor_restarts": "env runners rebuilt in the run so far (`rollout.env_actors`)",
    "rollout/trained_groups": "groups the learner step trained on (dynamic sampling: those "
                              "whose rewards differ)",
    "rollout/resample_rounds": "extra engine calls dynamic sampling made this step",
    "rollout/shared_state_turns": "turn-level credit: share of turns whose state another turn "
                                  "of the step shares (they get a common baseline)",
    "rollout/prefix_splits": "agent functions: requests that did not extend their episode's "
                             "record and started a new training row",
    "rollout/agent_request_errors": "agent functions: requests the endpoint refused",
    # game/
    "game/win_rate": "share of episodes won (games with a win/draw/loss result)",
    "game/draw_rate": "share of episodes drawn",
    "game/loss_rate": "share of episodes lost",
    "game/illegal_rate": "share of episodes an invalid or illegal turn ended",
    # gspo/
    "gspo/ratio_mean": "mean GSPO sequence ratio (length-normalised) over trained sequences",
    "gspo/ratio_min": "smallest sequence ratio",
    "gspo/ratio_max": "largest sequence ratio",
    "gspo/ratio_hist": "histogram of the sequence ratios",
    "gspo/clip_fraction_low": "share of sequences clipped below 1 - clip_low",
    "gspo/clip_fraction_high": "share of sequences clipped above 1 + clip_high",
    "gspo/clip_fraction_len_<name>": "clip fraction of the sequences in one response-length "
                                     "bin (le8 ... gt128; empty bins left out)",
    # learner/
    "learner/loss": "the GSPO loss, mean over the step's optimizer steps",
    "learner/grad_norm": "gradient norm before clipping, mean over the optimizer steps",
    "learner/lr": "the learning rate of the step's last optimizer step",
    "learner/entropy": "mean entropy of the policy on the sampled tokens",
    "learner/kl_ref": "learner.loss.kl_coef > 0: mean per-token KL estimate "
                      "(learner.loss.kl_estimator) of the policy at the step's start from the "
                      "reference, the model the run started from",
    "learner/skipped_steps": "optimizer steps skipped for a non-finite loss or gradient, "
                             "in the run so far",
    "learner/skipped_in_row": "optimizer steps skipped in a row, up to now "
                              "(`learner.optim.max_nonfinite_in_row` stops the run)",
    "learner/duplicate_trajectories": "episodes dropped because the learner had trained on "
                                      "their id before (a replayed collect)",
    "learner/restarts": "times the learner group was rebuilt from a checkpoint in this run",
    # timing/ and perf/
    "timing/step": "seconds of the whole step",
    "timing/generate": "seconds collecting the step's batch (async: waiting for it)",
    "timing/train": "seconds of the learner step",
    "timing/weight_sync": "seconds publishing the new weights to the rollout workers",
    "timing/other": "the rest of the step: advantages, logging, checkpoints",
    "timing/eval": "seconds of evaluation, on steps that evaluate",
    "timing/learner_idle": "seconds the learner waited for a batch",
    "timing/rollout_idle": "mean seconds a rollout worker had nothing to play",
    "perf/rollout_tokens_per_s": "sampled tokens per second of generation",
    "perf/train_tokens": "tokens through the learner's passes this step",
    "perf/train_tokens_per_s": "trained tokens per second of the learner step",
    # async/
    "async/staleness_mean": "mean learner versions the trained-on trajectories are behind",
    "async/staleness_max": "largest staleness in the batch (never above `max_staleness`)",
    "async/dropped_stale": "trajectories dropped for being more than `max_staleness` behind",
    # eval/
    "eval/policy_version": "the learner step whose weights were evaluated",
    "eval/<name>_as_<name>_reward": "greedy full games against an opponent (`eval.opponents`) "
                                    "in one seat: mean reward",
    "eval/<name>_as_<name>_<name>": "the same games: share won, drawn, lost or ended illegal "
                                    "(win, draw, loss, illegal), and not lost (nonloss)",
    "eval/<name>_accuracy": "a positions file (`eval.positions`): share of greedy moves "
                            "among its good moves",
    "eval/<name>_illegal": "the same positions: share of illegal or invalid replies",
    # agent/
    "agent/<name>": "an agent function's own metric (`AgentResult.metrics`), mean over the "
                    "step's episodes",
}


def glossary_entry(key: str) -> str | None:
    """The glossary entry that names `key` (exactly, or through its `<name>` parts); None
    if there is none."""
    if key in GLOSSARY:
        return key
    for entry in GLOSSARY:
        pattern = "^" + re.escape(entry).replace(re.escape("<name>"), "[^/]+") + "$"
        if "<name>" in entry and re.match(pattern, key):
            return entry
    return None
