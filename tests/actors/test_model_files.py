"""Model folders reach nodes that do not see the driver's: shipped through Ray's object store
and written, checked, into the node's own cache (a real local Ray)."""

from __future__ import annotations

import dataclasses
import os
import shutil

import pytest
import ray

from arl.actors.model_files import MARKER, local_model, ship
from arl.config import ModelConfig


@pytest.fixture(autouse=True)
def _local_ray():
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_a_node_with_the_same_files_uses_them(warm_model_dir):
    shipped = ship(warm_model_dir)
    model = ModelConfig(path=warm_model_dir)
    assert local_model(model, shipped) == model  # a shared filesystem: nothing is written
    assert local_model(model, None) == model  # one node: nothing is shipped


def test_a_node_without_the_folder_gets_a_checked_copy(warm_model_dir, tmp_path,
                                                       monkeypatch):
    source = tmp_path / "driver" / "tiny"
    shutil.copytree(warm_model_dir, source)
    shipped = ship(str(source))
    shutil.rmtree(source)  # this "node" does not have the driver's folder
    monkeypatch.setenv("ARL_HOME", str(tmp_path / "node-home"))
    model = local_model(ModelConfig(path=str(source)), shipped)
    assert model.path.startswith(str(tmp_path / "node-home" / "models" / "shipped"))
    assert os.path.isfile(os.path.join(model.path, MARKER))
    got = sorted(n for n in os.listdir(model.path) if n != MARKER)
    assert got == sorted(n for n in os.listdir(warm_model_dir) if not n.startswith("."))
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(model.path)  # a whole, loadable model folder
    again = local_model(ModelConfig(path=str(source)), shipped)
    assert again.path == model.path  # the second worker of the node reuses it


def test_shipped_bytes_that_do_not_match_are_refused(warm_model_dir, tmp_path,
                                                     monkeypatch):
    shipped = ship(warm_model_dir)
    bad = dataclasses.replace(shipped, digests=tuple((rel, "0" * 64)
                                                     for rel, _ in shipped.digests))
    monkeypatch.setenv("ARL_HOME", str(tmp_path))
    with pytest.raises(RuntimeError, match="sha256"):
        local_model(ModelConfig(path=str(tmp_path / "elsewhere")), bad)
