"""`arl view RUN_DIR`: the run's report.html over HTTP on 127.0.0.1 (the page reloads itself
while the run goes). Serves the report and the curves only: nothing else of the run
directory, no listings."""

from __future__ import annotations

import functools
import http.server
import ipaddress
import os
import sys

from arl.app.report import REPORT_FILE, write_report
from arl.config import is_loopback

SERVED = {"/": REPORT_FILE, f"/{REPORT_FILE}": REPORT_FILE, "/curves.png": "curves.png"}
TYPES = {REPORT_FILE: "text/html; charset=utf-8", "curves.png": "image/png"}


class ReportHandler(http.server.BaseHTTPRequestHandler):
    """GET of the report or the curves of one run directory; 404 for anything else."""

    def __init__(self, *args, run_dir: str, **kwargs):
        self.run_dir = run_dir
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        if not self._host_allowed():
            self.send_error(421, "Misdirected Request: unknown Host")
            return
        name = SERVED.get(self.path.split("?", 1)[0])
        path = os.path.join(self.run_dir, name) if name else None
        if path is None or not os.path.isfile(path):
            self.send_error(404)
            return
        with open(path, "rb") as f:
            body = f.read()
        self.send_response(200)
        self.send_header("Content-Type", TYPES[name])
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _host_allowed(self) -> bool:
        """Whether the request's Host header names this server by an address (an IP
        literal) or as localhost, with its port. A page of another site that a DNS trick
        points at this server sends its own name, and is refused (DNS rebinding)."""
        host = (self.headers.get("Host") or "").strip().lower()
        name, _, port = host.rpartition(":")
        if not name or host.endswith("]") or (":" in name and not name.endswith("]")):
            name, port = host, "80"  # no port: the scheme's own
        if not name or not port.isdigit() or int(port) != self.server.server_address[1]:
            return False
        name = name.removeprefix("[").removesuffix("]")
        if name == "localhost":
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base's name)
        pass  # a reload every 30 s is not news


def make_server(run_dir: str, host: str = "127.0.0.1", port: int = 8765):
    """A server for the report of `run_dir` (written now if the run has none yet)."""
    if not os.path.isfile(os.path.join(run_dir, REPORT_FILE)):
        write_report(run_dir)
    handler = functools.partial(ReportHandler, run_dir=os.path.abspath(run_dir))
    return http.server.ThreadingHTTPServer((host, port), handler)


def serve(run_dir: str, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve until Ctrl-C."""
    if not is_loopback(host):
        print(f"arl view: serving on {host}, where other machines can reach the report",
              file=sys.stderr)
    server = make_server(run_dir, host, port)
    print(f"serving {os.path.join(run_dir, REPORT_FILE)} at "
          f"http://{host}:{server.server_address[1]}/ (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
