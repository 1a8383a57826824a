"""Rollout engines behind the RolloutEngine protocol (`actors.engines.registry` picks one
by `rollout.engine`)."""
