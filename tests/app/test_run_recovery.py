"""A run directory's recovery paths without a cluster: a corrupt checkpoint refused before
anything starts (naming the newest intact one), resume=step_<n>, and the rewind a learner
restart makes."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from arl.app.run import Run
from arl.config import ConfigError, load_config
from arl.errors import UserError
from arl.model.checkpoint.store import MODEL_FILE, CheckpointError
from tests.builders import CI, learner_checkpoint


def _cfg(model_dir, out_dir, *overrides):
    return load_config([CI], [f"model.path={model_dir}", f"output_dir={out_dir}", *overrides])


@pytest.fixture(scope="module")
def built(tmp_path_factory, warm_model_dir):
    """A run directory with checkpoints after steps 2 and 4 and metrics rows 0-3 (built
    once; each test gets a copy)."""
    out = tmp_path_factory.mktemp("built")
    with Run(_cfg(warm_model_dir, out), progress=False) as run:
        for step in (2, 4):
            learner_checkpoint(warm_model_dir, run.checkpoint_dir(step))
        with open(run.metrics_path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"step": s}) + "\n" for s in range(4))
    return out


@pytest.fixture
def two_checkpoints(built, tmp_path, warm_model_dir):
    """This test's copy of `built`, under tmp_path, as a Run (not entered)."""
    shutil.copytree(built, tmp_path, dirs_exist_ok=True)
    return Run(_cfg(warm_model_dir, tmp_path), progress=False)


def test_a_truncated_newest_checkpoint_is_one_line_naming_the_intact_one(two_checkpoints,
                                                                         tmp_path,
                                                                         warm_model_dir):
    weights = os.path.join(two_checkpoints.checkpoint_dir(4), MODEL_FILE)
    with open(weights, "r+b") as f:
        f.truncate(os.path.getsize(weights) // 2)
    with pytest.raises(CheckpointError) as err:
        Run(_cfg(warm_model_dir, tmp_path, "resume=auto"), progress=False)
    message = str(err.value)
    assert "\n" not in message and weights in message and "truncated" in message
    assert f"newest intact checkpoint is {two_checkpoints.checkpoint_dir(2)}" in message
    assert "resume=step_000002 continues from it" in message


def test_resume_step_n_continues_from_that_one_and_sets_later_ones_aside(two_checkpoints,
                                                                         tmp_path,
                                                                         warm_model_dir):
    with Run(_cfg(warm_model_dir, tmp_path, "resume=step_2"), progress=False) as run:
        assert run.resume_from == run.checkpoint_dir(2) and run.start_step == 2
        folder = os.path.join(run.dir, "checkpoints")
        assert sorted(os.listdir(folder)) == ["latest", "step_000002", "step_000004.aside"]
        with open(run.metrics_path, encoding="utf-8") as f:
            assert [json.loads(line)["step"] for line in f] == [0, 1]


def test_resume_of_a_missing_step_lists_the_checkpoints_there(two_checkpoints, tmp_path,
                                                              warm_model_dir):
    with pytest.raises(UserError, match=r"no checkpoint step_000003 .*step_000002, step_000004"):
        Run(_cfg(warm_model_dir, tmp_path, "resume=step_3"), progress=False)


def test_resume_takes_never_auto_or_step_n_only(warm_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="resume"):
        _cfg(warm_model_dir, tmp_path, "resume=latest")


def test_rewind_keeps_earlier_rows_and_the_checkpoint_logged_steps_reach(two_checkpoints,
                                                                         tmp_path,
                                                                         warm_model_dir):
    with Run(_cfg(warm_model_dir, tmp_path, "resume=step_4"), progress=False) as run:
        run.open_sinks()
        # Step 4's checkpoint is there, but only steps 0-2 were logged (a crash between the
        # checkpoint and its step's row): the replay must start at 2, not 4.
        run.next_step = 3
        assert run.last_checkpoint() == run.checkpoint_dir(2)
        run.rewind(2)
        run.log(2, {"timing/step": 1.0})
    with open(run.metrics_path, encoding="utf-8") as f:
        assert [json.loads(line)["step"] for line in f] == [0, 1, 2]
    assert sorted(os.listdir(os.path.join(run.dir, "checkpoints"))) == [
        "latest", "step_000002", "step_000004.aside"]
