"""Every mistake a user can make at the command line: one line on stderr naming what is wrong
and what to do, exit status 2, no traceback (the `arl` command in a real subprocess)."""

from __future__ import annotations

import pathlib

import pytest

from tests.builders import arl_cli, one_line_exit_2

ROOT = pathlib.Path(__file__).resolve().parents[2]


_one_line_exit_2 = one_line_exit_2


def _arl(*args: str, env: dict | None = None, cwd: pathlib.Path = ROOT):
    return arl_cli(*args, env=env, cwd=cwd)


def test_malformed_yaml_names_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: 3\nrollout:\n  group_size: [4\n")
    _one_line_exit_2(_arl("train", str(bad)), "bad.yaml:", "not valid YAML")


def test_config_file_that_does_not_exist(tmp_path):
    _one_line_exit_2(_arl("train", str(tmp_path / "nope.yaml")), "config file not found",
                     "nope.yaml")


def test_a_key_of_another_env_and_an_unknown_env():
    _one_line_exit_2(_arl("train", "configs/ci.yaml", "env.opponent=random"),
                     "env.opponent", "unknown key of env 'tictactoe_move'")
    _one_line_exit_2(_arl("train", "configs/ci.yaml", "env.name=nope"),
                     "env.name", "unknown env 'nope'", "tictactoe")


def test_yaml_that_is_not_a_mapping(tmp_path):
    bad = tmp_path / "list.yaml"
    bad.write_text("- steps\n- 3\n")
    _one_line_exit_2(_arl("train", str(bad)), "list.yaml", "mapping")


def test_unknown_key_suggests_the_closest():
    _one_line_exit_2(_arl("train", "configs/ci.yaml", "rollout.grup_size=4"),
                     "rollout.grup_size", "did you mean 'rollout.group_size'")


def test_unknown_key_in_a_file_suggests_the_closest(tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text("learner:\n  lrr: 0.1\n")
    _one_line_exit_2(_arl("config", "show", str(bad)), "learner.lrr",
                     "did you mean 'learner.optim.lr'")


def test_hub_model_without_a_hub(tmp_path):
    out = _arl("train", "configs/ci.yaml", "model.path=hf:Qwen/Qwen2.5-0.5B-Instruct@main",
               f"output_dir={tmp_path}",
               env={"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")})
    _one_line_exit_2(out, "hf:Qwen/Qwen2.5-0.5B-Instruct@main", "could not be downloaded")
    assert "Ray" not in out.stdout + out.stderr  # it failed before Ray started


def test_a_missing_path_is_not_a_download(tmp_path):
    out = _arl("train", "configs/ci.yaml", "model.path=Qwen/Qwen2.5-0.5B-Instruct",
               f"output_dir={tmp_path}")
    _one_line_exit_2(out, "no model folder at 'Qwen/Qwen2.5-0.5B-Instruct'",
                     "hf:Qwen/Qwen2.5-0.5B-Instruct@<revision>")


def test_missing_model_built_by_arl_says_to_warm_start(tmp_path):
    out = _arl("train", "configs/tictactoe.yaml", env={"ARL_HOME": str(tmp_path)})
    _one_line_exit_2(out, "model.path", "arl warmstart configs/warmstart_games.yaml")
    # Each warm start is named by the config that builds it; the demo's serves ci.yaml too.
    for config in ("configs/tictactoe_move.yaml", "configs/ci.yaml"):
        out = _arl("train", config, env={"ARL_HOME": str(tmp_path)})
        _one_line_exit_2(out, "model.path", "arl warmstart configs/warmstart_board.yaml")
    out = _arl("train", "configs/ci.yaml", "model.path=cache:no-such-model",
               env={"ARL_HOME": str(tmp_path)})
    _one_line_exit_2(out, "arl warmstart warmstart.output=cache:no-such-model")


@pytest.mark.parametrize("args", [
    ("eval", "--checkpoint", "/no/such/checkpoint"),
    ("eval", "--checkpoint", "{tmp}"),
    ("export", "/no/such/checkpoint", "{tmp}/out"),
    ("play", "/no/such/checkpoint"),
])
def test_checkpoint_that_does_not_exist(args, tmp_path):
    args = tuple(a.format(tmp=tmp_path) for a in args)
    _one_line_exit_2(_arl(*args), "checkpoint")


def test_a_corrupt_checkpoint(tmp_path):
    ckpt = tmp_path / "checkpoints" / "step_000001"
    ckpt.mkdir(parents=True)
    (ckpt / "manifest.json").write_text("{not json")
    _one_line_exit_2(_arl("eval", "--checkpoint", str(tmp_path)), "manifest.json",
                     "not valid JSON")


def test_plot_of_a_missing_run(tmp_path):
    _one_line_exit_2(_arl("plot", str(tmp_path / "nope")), "no run directory")
    _one_line_exit_2(_arl("plot", str(tmp_path)), "metrics.jsonl")


def test_plan_of_a_config_only_model_without_prompt_tokens():
    out = _arl("plan", "configs/gpu_one.yaml", "model.path=configs/models/qwen3-1.7b")
    _one_line_exit_2(out, "--prompt-tokens")


def test_bad_positions_file(tmp_path, warm_model_dir):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"board": "X........", "to_move": "O", "good_moves": [1]}\n')
    _one_line_exit_2(_arl("eval", "--checkpoint", warm_model_dir, "--positions", str(bad)),
                     "p.jsonl:1")
    _one_line_exit_2(_arl("eval", "--checkpoint", warm_model_dir, "--positions",
                          str(tmp_path / "none.jsonl")), "cannot read")


@pytest.mark.parametrize("override, key, says", [
    ("learner.optim.lr=inf", "learner.optim.lr", "finite number"),
    ("rollout.episode_timeout_s=inf", "rollout.episode_timeout_s", "finite number"),
    ("rollout.timeout_s=-inf", "rollout.timeout_s", "finite number"),
    ("run_name=" + "r" * 300, "run_name", "1-100 letters"),
    ("run_name=../elsewhere", "run_name", "plain name"),
    ("ray.host=0.0.0.0", "ray.host", "ray.allow_remote=true"),
    ("rollout.endpoint_host=192.0.2.7", "rollout.endpoint_host", "not a loopback address"),
    ("wandb.project=" + "x" * 100_000 + "\u2028", "wandb.project", "control character"),
])
def test_values_the_schema_refuses_in_one_bounded_line(override, key, says):
    line = _one_line_exit_2(_arl("train", "configs/ci.yaml", override), key, says)
    assert len(line) <= 520  # the echo of what was typed is cut


def test_a_non_loopback_host_needs_its_opt_in_and_is_logged(caplog):
    from arl.config import load_config

    cfg = load_config(["configs/ci.yaml"], ["ray.host=0.0.0.0", "ray.allow_remote=true"],
                      check_paths=False)
    assert cfg.ray.host == "0.0.0.0"
    assert any("ray.host=0.0.0.0" in r.message and "other machines" in r.message
               for r in caplog.records)


def test_a_nul_byte_anywhere_is_one_line(capsys, tmp_path):
    from arl.app.cli import main

    yaml_file = tmp_path / "nul.yaml"
    yaml_file.write_text('output_dir: "runs\\0x"\n')
    for argv in (["train", "configs/ci.yaml", "output_dir=a\x00b"],
                 ["train", "configs/ci.yaml", str(yaml_file)],
                 ["train", "configs/ci.yaml", "a\x00b=1"],
                 ["eval", "--checkpoint", "run\x00s"], ["export", "a\x00b", "out"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "\x00" not in err, err


def test_version_is_the_installed_distributions():
    from importlib.metadata import version

    import arl

    out = _arl("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"arl {arl.__version__}"
    assert version("arl") == arl.__version__
