"""Rollout engines behind the RolloutEngine protocol."""
