"""Errors that are the user's to fix: a bad config value, a missing file, an unusable
checkpoint or model. The `arl` command prints one line for each and exits with status 2;
any other exception is a bug and keeps its traceback."""

from __future__ import annotations


class UserError(Exception):
    """Something the user gave arl is wrong; the message says what, and what to do."""


class ModelUnavailable(UserError, FileNotFoundError):
    """`model.path` names no model this machine can load."""


class LearnerLost(RuntimeError):
    """A learner actor died (its process ended: an OOM kill, a segfault, a lost node). The
    driver rebuilds the learner group from the last checkpoint (`learner.max_restarts`)."""
