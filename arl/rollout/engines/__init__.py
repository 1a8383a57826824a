"""Rollout engines behind the RolloutEngine protocol (`arl.rollout.engines.registry` picks one
by `rollout.engine`)."""
