"""The run report in a real headless browser (Debian's chromium; `.ci/run` installs it):
a real run's report.html, served by `arl view` on 127.0.0.1 and opened as a file, shows
its curves and a sample game that replays, is not blank, and requests nothing from
anywhere but 127.0.0.1."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading

import pytest

from arl.app.report import write_report
from arl.app.train import train
from arl.config import load_config

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium: apt-get install -y chromium")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--window-size=1400,1800", "--virtual-time-budget=5000")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, warm_model_dir):
    out = tmp_path_factory.mktemp("runs")
    cfg = load_config(["configs/ci.yaml"], [f"model.path={warm_model_dir}", f"output_dir={out}",
                                            "wandb.samples_every=1", "ray.address=local"])
    train(cfg)
    return out / "ci"


def _chromium(tmp_path, url: str, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, url],
                          capture_output=True, text=True, timeout=120)


def _page_requests(net_log, site: str) -> set[str]:
    """URLs of every request made for the page at `site` (its main frame and everything it
    loads: their network isolation key's top frame is the page's site), from chromium's
    NetLog. The browser's own traffic (update and time checks) has other keys."""
    text = net_log.read_text()
    try:
        log = json.loads(text)
    except json.JSONDecodeError:  # chromium may leave the closing bracket out
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    params = [e.get("params") or {} for e in log.get("events", []) if e.get("type") == start]
    return {p["url"] for p in params
            if "url" in p and str(p.get("network_isolation_key", "")).startswith(site)}


def test_report_written_by_the_run(run_dir):
    page = (run_dir / "report.html").read_text()
    assert page.count('<svg class="chart"') >= 6
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    assert "finished" in page


def test_report_in_a_real_browser_over_arl_view(run_dir, tmp_path):
    from PIL import Image  # noqa: F401 (matplotlib's dependency: decodes the screenshot)

    from arl.app.view import make_server

    server = make_server(str(run_dir), "127.0.0.1", 0)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{port}/"
        dom = _chromium(tmp_path, url, "--dump-dom")
        shot = tmp_path / "shot.png"
        net = tmp_path / "net.json"
        _chromium(tmp_path, url, f"--screenshot={shot}", f"--log-net-log={net}")
    finally:
        server.shutdown()
        server.server_close()
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert html.count('class="chart"') >= 6  # the curves
    assert 'class="game"' in html and "move 2 of" in html  # the script built a replay
    assert "choose_square" in html  # a real conversation of the run
    _assert_not_blank(shot)
    urls = _page_requests(net, "http://127.0.0.1")
    assert f"http://127.0.0.1:{port}/" in urls, urls
    outside = {u for u in urls if not u.startswith(f"http://127.0.0.1:{port}/")}
    assert not outside, outside


def test_report_opened_as_a_file(run_dir, tmp_path):
    write_report(str(run_dir))
    dom = _chromium(tmp_path, (run_dir / "report.html").as_uri(), "--dump-dom")
    assert 'class="game"' in dom.stdout and dom.stdout.count('class="chart"') >= 6


HOSTILE = ('</script><script>document.body.dataset.pwned = "1"</script><!--<script>'
           '<img src=x onerror="document.body.dataset.pwned=2">]]>&amp;')


def test_a_hostile_sample_is_shown_as_text_and_runs_nothing(run_dir, tmp_path):
    """Model output that tries to end the data element, open a comment or add a script is
    text on the page: the replay still works, nothing of it runs, nothing is fetched."""
    hostile = tmp_path / "hostile"
    shutil.copytree(run_dir, hostile)
    with open(hostile / "samples.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": 99, "reward": 1.0, "outcome": "win", "messages": [
            {"role": "user", "content": "your move"},
            {"role": "assistant", "content": HOSTILE}]}) + "\n")
    write_report(str(hostile))
    page = (hostile / "report.html").read_text()
    assert "</script><script>" not in page and "<!--" not in page and "<img" not in page
    net = tmp_path / "net.json"
    dom = _chromium(tmp_path, (hostile / "report.html").as_uri(), "--dump-dom",
                    f"--log-net-log={net}").stdout
    assert "data-pwned" not in dom and "<img" not in dom  # no script ran, no element made
    assert "&lt;/script&gt;&lt;script&gt;document.body.dataset.pwned" in dom  # text, shown
    assert 'class="game"' in dom and "move 2 of" in dom  # the page's own script ran
    assert "step 99: reward 1, outcome win" in dom
    assert not {u for u in _page_requests(net, "file://") if not u.startswith("file://")}


def test_the_server_serves_the_report_only(run_dir):
    import urllib.error
    import urllib.request

    from arl.app.view import make_server

    server = make_server(str(run_dir), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert b"<svg" in urllib.request.urlopen(f"{base}/report.html").read()  # noqa: S310
        for path in ("/config.json", "/checkpoints/latest", "/../../etc/passwd"):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(base + path)  # noqa: S310
            assert err.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


def _assert_not_blank(path) -> None:
    from PIL import Image

    image = Image.open(path).convert("RGB")
    colors = image.getcolors(maxcolors=1 << 20)
    assert image.size[0] >= 800 and colors is not None and len(colors) > 50, len(colors or [])
    dominant = max(count for count, _ in colors)
    assert dominant < 0.97 * image.size[0] * image.size[1]  # not one flat colour
