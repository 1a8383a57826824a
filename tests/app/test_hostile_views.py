"""The run's views against what the world sends them: `arl view` answers only requests that
name it (DNS rebinding), the readers of a run's files take a line cut short by a crash, and
a view that fails to draw never ends a run."""

from __future__ import annotations

import http.client
import json
import threading

import pytest

from arl.actors.hosts import LocalHost
from arl.app.cli import main
from arl.app.view import make_server


def _run_dir(tmp_path, truncated: bool = False):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "rollout/reward_mean": -0.5 + 0.1 * s, "timing/step": 0.5}
            for s in range(5)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if truncated:  # the last row as a crash (or a run still writing it) leaves it
        text += '{"step": 5, "rollout/reward_me'
    (run / "metrics.jsonl").write_text(text)
    (run / "samples.jsonl").write_text('{"step": 0, "reward": 1.0, "messages": [{"ro')
    return run


@pytest.fixture()
def server(tmp_path):
    server = make_server(str(_run_dir(tmp_path)), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _get(server, host: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    try:
        conn.request("GET", "/", headers={"Host": host})
        return conn.getresponse().status
    finally:
        conn.close()


def test_view_answers_only_requests_that_name_it(server):
    port = server.server_address[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
        assert _get(server, host) == 200, host
    # A page of another site, its name pointed at 127.0.0.1 (DNS rebinding), and near misses.
    for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1:{port + 1}",
                 f"localhost.attacker.example:{port}", "", f"127.0.0.1.nip.io:{port}"):
        assert _get(server, host) == 421, host


@pytest.mark.parametrize("command", ["plot", "view"])
def test_a_line_cut_short_is_passed_over(tmp_path, command, monkeypatch, capsys):
    run = _run_dir(tmp_path, truncated=True)
    if command == "view":  # serve once, without blocking: the report is written first
        monkeypatch.setattr("http.server.ThreadingHTTPServer.serve_forever",
                            lambda self: None)
        assert main(["view", str(run), "--port", "0"]) == 0
    else:
        assert main(["plot", str(run)]) == 0
        assert (run / "curves.png").stat().st_size > 1000
    page = (run / "report.html").read_text()
    assert "5 steps logged (last step 4)" in page


def test_a_report_that_fails_to_draw_never_ends_the_run(tmp_path, warm_model_dir,
                                                        monkeypatch, caplog):
    import arl.app.run as run_module
    from arl.app.train import train
    from tests.builders import ci_config

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_module, "write_report", broken)
    monkeypatch.setattr(run_module, "plot_run", broken)
    cfg = ci_config(warm_model_dir, tmp_path, "steps=10")
    metrics = train(cfg, host=LocalHost())
    assert metrics["rollout/reward_mean"] is not None  # all 10 steps, the report failing
    rows = (tmp_path / "ci" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == list(range(10))
    assert any("No space left on device" in r.message and "goes on" in r.message
               for r in caplog.records)


def test_config_json_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    import os

    from arl.files import write_atomic

    path = tmp_path / "config.json"
    write_atomic(str(path), '{"run_name": "old"}')

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)  # the write fails halfway
    with pytest.raises(OSError):
        write_atomic(str(path), '{"run_name": "new", "more": "' + "x" * 10000 + '"}')
    assert json.loads(path.read_text()) == {"run_name": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
