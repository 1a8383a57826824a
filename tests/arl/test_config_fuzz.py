"""Property tests of the config schema against hostile input: random keys, random values of
every kind, at every key. Whatever comes in, `arl` either accepts the config or prints one
line and exits 2 — never a traceback, never a second line."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arl.app.train as driver
from arl.app.cli import main
from arl.config import keys
from arl.envs.config import FullGameConfig

KEYS = keys() + keys(env=FullGameConfig)
NUMBERS = st.one_of(st.integers(-10**30, 10**30), st.floats(allow_nan=True, allow_infinity=True))
VALUES = st.one_of(
    NUMBERS.map(str),
    st.sampled_from(["inf", "-inf", "nan", "1e999", "null", "true", "[]", "{}", "[1, x]",
                     "{a: 1}", "'", '"', "${oc.env:HOME}", "${x}", "cache:..", "../x", "a" * 400,
                     "127.0.0.1", "0.0.0.0", "::", "step_3", "auto", "x:y", "-1"]),
    st.text(max_size=60),  # any unicode: control characters, NUL, surrogates excluded by utf-8
)
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _run(capsys, argv: list[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as done:  # argparse's own refusals
        code = done.code
    return code, capsys.readouterr().err


def _assert_one_line_or_ok(code: int, err: str) -> None:
    assert code in (0, 2), (code, err)
    if code == 2:
        lines = err.splitlines()
        assert len(lines) == 1, err
        assert "Traceback" not in err and len(lines[0]) <= 520, err


@SETTINGS
@given(key=st.sampled_from(KEYS), value=VALUES)
def test_any_value_at_any_key_is_accepted_or_one_line(capsys, monkeypatch, key, value):
    """`arl train` up to the point where it would start: loading and validating."""
    monkeypatch.setattr(driver, "train", lambda cfg: {})
    game = ["env.name=tictactoe"] if key.startswith("env.") and key not in keys() else []
    code, err = _run(capsys, ["train", "configs/ci.yaml", *game, f"{key}={value}"])
    _assert_one_line_or_ok(code, err)


@SETTINGS
@given(key=st.text(min_size=1, max_size=40).filter(lambda k: "=" not in k), value=VALUES)
def test_any_key_is_refused_in_one_line(capsys, monkeypatch, key, value):
    monkeypatch.setattr(driver, "train", lambda cfg: {})
    code, err = _run(capsys, ["config", "show", f"{key}={value}"])
    _assert_one_line_or_ok(code, err)


@SETTINGS
@given(text=st.text(max_size=300))
def test_any_yaml_file_is_accepted_or_one_line(capsys, tmp_path, text):
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    code, err = _run(capsys, ["config", "show", str(path)])
    _assert_one_line_or_ok(code, err)
