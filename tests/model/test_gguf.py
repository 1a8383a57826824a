"""arl/model/gguf.py without its extra: a clear error naming the install command."""

import importlib.util

import pytest

from arl.errors import ModelUnavailable, UserError
from arl.model.source import local_folder


def test_a_gguf_file_without_the_extra_names_the_install(tmp_path, monkeypatch):
    source = tmp_path / "model.gguf"
    source.write_bytes(b"GGUF")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "accelerate" else real(name, *a))
    expected = r"needs (gguf and )?accelerate: pip install -e '\.\[gguf\]'"
    with pytest.raises(ModelUnavailable, match=expected):
        local_folder(str(source), cache=str(tmp_path / "cache"))
    assert issubclass(ModelUnavailable, UserError)  # `arl` prints one line, exit status 2
    assert not any((tmp_path / "cache").iterdir())  # no half-made conversion is left
