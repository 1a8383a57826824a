"""The one config schema: defaults, files, overrides, and errors that name the key."""

import importlib.util
import pathlib
import subprocess
import sys

import pytest

from arl.config import Config, ConfigError, load_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_validates(path):
    cfg = load_config([str(path)], check_paths=False)
    assert isinstance(cfg, Config)


def test_files_then_overrides(tmp_path):
    a = tmp_path / "a.yaml"
    a.write_text("seed: 3\nrollout:\n  group_size: 4\n")
    b = tmp_path / "b.yaml"
    b.write_text("rollout:\n  group_size: 6\n")
    cfg = load_config([str(a), str(b)], ["learner.optim.lr=0.5", "run_name=x"], check_paths=False)
    assert (cfg.seed, cfg.rollout.group_size, cfg.learner.optim.lr, cfg.run_name) == \
        (3, 6, 0.5, "x")
    loss = cfg.learner.loss
    assert loss.clip_low == 3e-4 and loss.clip_high == 4e-4  # paper defaults


def test_env_runners_cannot_play_against_a_self_play_snapshot():
    with pytest.raises(ConfigError, match="rollout.env_actors.*self-play"):
        load_config([str(ROOT / "configs/tictactoe.yaml")],
                    ["rollout.env_actors=2", "env.opponent=policy"], check_paths=False)
    assert load_config([], ["rollout.env_actors=2"], check_paths=False).rollout.env_actors == 2


@pytest.mark.parametrize(
    "override, key",
    [
        ("no_such.key=1", "no_such.key"),
        ("rollout.nope=1", "rollout.nope"),
        ("rollout.group_size=1", "rollout.group_size"),
        ("rollout.group_size=abc", "rollout.group_size"),
        ("rollout.groups_per_step=-2", "rollout.groups_per_step"),
        ("learner.loss.clip_low=0", "learner.loss.clip_low"),
        ("learner.loss.clip_high=-1e-4", "learner.loss.clip_high"),
        ("learner.loss.name=ppo", "learner.loss.name"),
        ("learner.optim.mini_batches=3", "learner.optim.mini_batches"),
        ("learner.loss.old_logprobs=engine", "learner.loss.old_logprobs"),
        ("learner.loss.negative_odds_cap=0.5", "learner.loss.negative_odds_cap"),
        ("learner.loss.negative_odds_cap=-1", "learner.loss.negative_odds_cap"),
        ("env.name=chess", "env.name"),
        ("wandb.mode=sometimes", "wandb.mode"),
        ("rollout.top_p=1.5", "rollout.top_p"),
        ("rollout.env_actors=-1", "rollout.env_actors"),
        ("rollout.engine=sglang", "rollout.engine"),
        ("rollout.vllm.gpu_memory_utilization=1.5", "rollout.vllm.gpu_memory_utilization"),
        ("warmstart.architecture=llama", "warmstart.architecture"),
        ("rollout.gpus_per_worker=0.5", "rollout.gpus_per_worker"),  # the hf engine is CPU
        ("learner.resources.gpus=-1", "learner.resources.gpus"),
        ("run_name=../x", "run_name"),
        ("seed", "seed"),
    ],
)
def test_bad_values_name_their_key(override, key):
    with pytest.raises(ConfigError) as err:
        load_config([], [override], check_paths=False)
    assert err.value.key == key
    assert key in str(err.value)


def test_sampler_old_logprobs_need_sync_mode_and_no_behaviour_correction():
    ok = load_config([], ["learner.loss.old_logprobs=sampler"], check_paths=False)
    assert ok.learner.loss.old_logprobs == "sampler"
    for other in ("mode=async", "learner.loss.behaviour_is_cap=2"):
        with pytest.raises(ConfigError) as err:
            load_config([], ["learner.loss.old_logprobs=sampler", other], check_paths=False)
        assert err.value.key == "learner.loss.old_logprobs"


@pytest.mark.parametrize("invalid,ok", [(-1.0, False), (-1.5, False), (-1.6, True)])
def test_an_invalid_call_must_cost_more_than_a_played_game(invalid, ok):
    overrides = ["env.name=tictactoe", "env.reward_loss=-1", "env.reward_move_blunder=-0.5",
                 f"env.reward_invalid={invalid}"]
    if ok:
        assert load_config([], overrides, check_paths=False).env.reward_invalid == invalid
        return
    with pytest.raises(ConfigError) as err:
        load_config([], overrides, check_paths=False)
    assert err.value.key == "env.reward_invalid"


def test_unknown_key_in_file_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("learner:\n  lrate: 0.1\n")
    with pytest.raises(ConfigError) as err:
        load_config([str(bad)], check_paths=False)
    assert err.value.key == "learner.lrate"


def test_missing_model_dir_is_named(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config([], [f"model.path={tmp_path}/nothing"])
    assert err.value.key == "model.path"


def test_vllm_engine_refuses_top_p_below_one():
    with pytest.raises(ConfigError) as err:
        load_config([], ["rollout.engine=vllm", "rollout.top_p=0.9"], check_paths=False)
    assert err.value.key == "rollout.top_p"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_vllm_engine_without_the_extra_names_it(warm_model_dir, tmp_path):
    from arl.app.train import train

    cfg = load_config([], [f"model.path={warm_model_dir}", "rollout.engine=vllm",
                           f"output_dir={tmp_path}"])
    with pytest.raises(ConfigError) as err:
        train(cfg)  # raises before Ray starts or any run directory is made
    assert not any(tmp_path.iterdir())
    assert err.value.key == "rollout.engine"
    assert "make venv-vllm" in str(err.value) and ".[vllm]" in str(err.value)


def test_hub_models_are_named_with_a_revision_and_fail_clearly_without_a_hub(tmp_path,
                                                                            monkeypatch):
    from arl.errors import ModelUnavailable
    from arl.model.source import local_folder
    from arl.model_source import hub_model

    assert hub_model("hf:Qwen/Qwen2.5-0.5B-Instruct@7ae557604adf67be50417f59c2c2f167def9a775") \
        == ("Qwen/Qwen2.5-0.5B-Instruct", "7ae557604adf67be50417f59c2c2f167def9a775")
    for bad in ("hf:Qwen/Qwen2.5-0.5B-Instruct", "hf:Qwen@main", "hf:a/b/c@main",
                "hf:../x@main", "hf:a/b@"):
        with pytest.raises(ModelUnavailable, match="hf:owner/name@revision"):
            hub_model(bad)
    cfg = load_config([], ["model.path=hf:Qwen/Qwen2.5-0.5B-Instruct@main"])  # no hub yet
    assert cfg.model.path == "hf:Qwen/Qwen2.5-0.5B-Instruct@main"
    import huggingface_hub.constants as hub

    # Offline, with an empty cache: the download must fail, fast and by name.
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelUnavailable, match="hf:Qwen/Qwen2.5-0.5B-Instruct@main"):
        local_folder("hf:Qwen/Qwen2.5-0.5B-Instruct@main")


def test_a_path_that_names_nothing_is_never_a_download(tmp_path, monkeypatch):
    """A relative path that does not exist is an error naming it, whatever its shape; the
    hub loader is never reached (it would raise here: a sentinel)."""
    import huggingface_hub

    from arl.errors import ModelUnavailable
    from arl.model.source import local_folder

    def no_download(*args, **kwargs):
        raise AssertionError("a missing path reached the hub loader")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_download)
    monkeypatch.chdir(tmp_path)
    for path in ("Qwen/Qwen2.5-0.5B-Instruct", "models/mine", "mine"):
        with pytest.raises(ModelUnavailable, match="no model folder at"):
            local_folder(path)
        with pytest.raises(ConfigError, match="no model folder at"):
            load_config([], [f"model.path={path}"])


def test_cli_rejects_unknown_key_before_anything_heavy_is_imported():
    code = ("import sys; from arl.app.cli import main; "
            "rc = main(['train', 'configs/ci.yaml', 'no_such.key=1']); "
            "print(rc, sorted(m for m in ('ray', 'torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.split() == ["2", "[]"], out.stdout + out.stderr
    assert "no_such.key" in out.stderr


@pytest.mark.parametrize("old, new", [("learner.lr=0.1", "learner.optim.lr"),
                                      ("learner.loss=gspo", "learner.loss.name"),
                                      ("learner.advantage=turn", "learner.advantage.level"),
                                      ("learner.checkpoint_every=5", "learner.checkpoint.every"),
                                      ("learner.resources.gpu_node=1",
                                       "learner.resources.custom.gpu_node")])
def test_an_old_flat_learner_key_names_its_new_place(old, new, tmp_path):
    with pytest.raises(ConfigError, match=f"moved to {new}"):
        load_config([], [old], check_paths=False)
    key, value = old.split("=")
    flat = tmp_path / "old.yaml"
    flat.write_text(f"learner:\n  {key.split('.', 1)[1].replace('.', ': {')}: {value}"
                    + "}" * key.count(".", len("learner.")) + "\n")
    with pytest.raises(ConfigError, match=f"moved to {new}.*from {flat}"):
        load_config([str(flat)], [], check_paths=False)


def test_nccl_weight_sync_is_refused_on_a_shared_gpu():
    """NCCL refuses two ranks on one device: a learner and an engine on fractions of one GPU
    must use the object store (one line naming the key), whole GPUs may use NCCL."""
    gpu = ["rollout.engine=vllm", "weight_sync.transport=nccl"]
    with pytest.raises(ConfigError, match="object_store for a shared GPU") as err:
        load_config([], gpu + ["rollout.gpus_per_worker=0.5", "learner.resources.gpus=0.5"],
                    check_paths=False)
    assert err.value.key == "weight_sync.transport"
    cfg = load_config([], gpu + ["rollout.gpus_per_worker=1", "learner.resources.gpus=1"],
                      check_paths=False)
    assert cfg.weight_sync.transport == "nccl"
