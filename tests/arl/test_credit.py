"""Turn-level credit assignment (arl/credit.py) on hand-made episodes."""

from __future__ import annotations

import numpy as np
import pytest

from arl.credit import returns_to_go, shared_turn_share, turn_advantages


def test_returns_to_go_by_hand():
    assert returns_to_go([0.0, 0.0, 1.0], 1.0).tolist() == [1.0, 1.0, 1.0]
    assert returns_to_go([0.5, 0.0, 1.0], 0.5).tolist() == [0.75, 0.5, 1.0]
    assert returns_to_go([], 1.0).tolist() == []


def test_turns_in_the_same_state_share_a_baseline():
    # One group of 3 games. All open in state "a"; games 0 and 1 reach state "b" on turn 2,
    # where game 0 then blunders (-1) and game 1 plays on to a win (+1).
    rewards = [(0.0, -1.0), (0.0, 1.0), (0.5,)]
    states = [("a", "b"), ("a", "b"), ("a",)]
    adv = turn_advantages(rewards, states, group_size=3, step_weight=1.0, eps=0.0)
    episode = np.array([-1.0, 1.0, 0.5])
    e = (episode - episode.mean()) / episode.std()  # the usual group advantage
    # state a: returns -1, 1, 0.5 (the same as the episodes'); state b: -1 and 1.
    a = e
    b = np.array([-1.0, 1.0])
    assert adv[0] == pytest.approx([e[0] + a[0], e[0] + b[0]])
    assert adv[1] == pytest.approx([e[1] + a[1], e[1] + b[1]])
    assert adv[2] == pytest.approx([e[2] + a[2]])
    half = turn_advantages(rewards, states, 3, step_weight=0.5, eps=0.0)
    assert half[0][1] == pytest.approx(e[0] + 0.5 * b[0])


def test_a_state_seen_once_or_with_equal_returns_adds_nothing():
    rewards = [(0.0, 1.0), (1.0, 0.0)]
    states = [("a", "x"), ("a", "y")]  # x and y are seen once each; a has equal returns 1, 1
    adv = turn_advantages(rewards, states, 2, step_weight=1.0, eps=1e-6)
    assert [a.tolist() for a in adv] == [[0.0, 0.0], [0.0, 0.0]]  # equal returns: no signal


def test_unnamed_turns_get_the_episode_advantage_and_groups_stay_apart():
    rewards = [(1.0,), (0.0,), (0.0, 0.0), (0.0, 1.0)]
    states = [(None,), (None,), ("s", "t"), ("s", "t")]
    adv = turn_advantages(rewards, states, 2, step_weight=1.0, eps=0.0)
    assert adv[0].tolist() == [1.0] and adv[1].tolist() == [-1.0]
    # second group: episode advantages -1, +1; state s returns 0 vs 1; state t 0 vs 1
    assert adv[2].tolist() == [-2.0, -2.0] and adv[3].tolist() == [2.0, 2.0]
    with pytest.raises(ValueError):
        turn_advantages(rewards[:3], states[:3], 2, 1.0, 0.0)


def test_batch_scope_shares_a_baseline_across_groups():
    # Two groups of 2. State "s" is played once in each group: alone in its group it
    # teaches nothing; across the batch its two turns (returns 0 and 1) share a baseline.
    rewards = [(0.0,), (0.0,), (1.0,), (1.0,)]
    states = [("s",), ("u",), ("s",), ("v",)]
    by_group = turn_advantages(rewards, states, 2, step_weight=1.0, eps=0.0)
    assert [a.tolist() for a in by_group] == [[0.0], [0.0], [0.0], [0.0]]
    by_batch = turn_advantages(rewards, states, 2, step_weight=1.0, eps=0.0, scope="batch")
    assert [a.tolist() for a in by_batch] == [[-1.0], [0.0], [1.0], [0.0]]
    with pytest.raises(ValueError):
        turn_advantages(rewards, states, 2, 1.0, 0.0, scope="world")


def test_no_discount_compares_the_turns_own_rewards_and_the_episode_term_sums():
    # Both games open in "a" with a good move (+0.1) vs a blunder (-0.2); then both reach "b"
    # and game 1 wins (+1) where game 0 draws (0). gamma = 0: the step term in "a" sees only
    # +0.1 vs -0.2, not the win that followed; the episode term still sums every reward.
    rewards = [(0.1, 0.0), (-0.2, 1.0)]
    states = [("a", "b"), ("a", "b")]
    adv = turn_advantages(rewards, states, 2, step_weight=1.0, eps=0.0, gamma=0.0)
    # totals 0.1 vs 0.8: episode advantages -1, +1; step "a": +1, -1; step "b": -1, +1
    assert adv[0].tolist() == pytest.approx([0.0, -2.0])
    assert adv[1].tolist() == pytest.approx([0.0, 2.0])


def test_shared_turn_share_counts_turns_whose_state_recurs_in_scope():
    states = [("a", "b"), ("a",), ("b", None), ("c",)]
    # by group (size 2): group 0 has a, b, a -> 2 of 3 shared; group 1 has b, c -> none
    assert shared_turn_share(states, 2, "group") == pytest.approx(2 / 5)
    # across the batch: a twice, b twice, c once -> 4 of 5
    assert shared_turn_share(states, 2, "batch") == pytest.approx(4 / 5)
    assert shared_turn_share([], 2, "batch") == 0.0


def test_all_scope_gives_every_turn_one_baseline_whatever_its_state():
    # Per-move rewards, gamma 0: game 0 always blunders (-0.2) in state "a", which no other
    # turn was played in; game 1 plays well (+0.1) in "b" and "c". A per-state baseline
    # leaves every turn at A^S = 0; one baseline for all turns pushes the blunder down.
    rewards = [(-0.2,), (0.1, 0.1)]
    states = [("a",), ("b", "c")]
    per_state = turn_advantages(rewards, states, 2, step_weight=1.0, eps=0.0, gamma=0.0,
                                scope="batch")
    e = np.array([-1.0, 1.0])  # the episode term: totals -0.2 vs 0.2
    assert [a.tolist() for a in per_state] == [[e[0]], [e[1], e[1]]]
    shared = turn_advantages(rewards, states, 2, step_weight=1.0, eps=0.0, gamma=0.0,
                             scope="all")
    r = np.array([-0.2, 0.1, 0.1])
    s = (r - r.mean()) / r.std()
    assert shared[0].tolist() == pytest.approx([e[0] + s[0]])
    assert shared[1].tolist() == pytest.approx([e[1] + s[1], e[1] + s[2]])
    assert s[0] < 0 < s[1]
    # unnamed turns stay out of the shared baseline
    mixed = turn_advantages([(-0.2,), (0.1, 5.0)], [("a",), ("b", None)], 2, 1.0, 0.0,
                            gamma=0.0, scope="all")
    assert mixed[0][0] == pytest.approx(-1.0 - 1.0) and mixed[1][1] == pytest.approx(1.0)
    # the metric of recurring states reads "all" as "batch"
    assert shared_turn_share([("a", "b"), ("a",)], 2, "all") == pytest.approx(2 / 3)


def test_scale_none_centres_both_terms_without_dividing():
    rewards = [[1.0, 0.0], [0.0, 2.0], [3.0], [0.0]]  # two groups of two
    states = [["a", "b"], ["a", "c"], ["a"], ["a"]]
    got = turn_advantages(rewards, states, 2, 1.0, 1e-6, 1.0, "group", "none")
    # group 1: totals 1, 2 -> -0.5, +0.5; state a: returns 1, 2 -> -0.5, +0.5
    # group 2: totals 3, 0 -> +1.5, -1.5; state a: returns 3, 0 -> +1.5, -1.5
    assert [a.tolist() for a in got] == [[-1.0, -0.5], [1.0, 0.5], [3.0], [-3.0]]
