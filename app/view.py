"""`arl view RUN_DIR`: the run's report.html over HTTP on 127.0.0.1 (the page reloads itself
while the run goes). Serves the report and the curves only: nothing else of the run
directory, no listings."""

from __future__ import annotations

import functools
import http.server
import os

from app.report import REPORT_FILE, write_report

SERVED = {"/": REPORT_FILE, f"/{REPORT_FILE}": REPORT_FILE, "/curves.png": "curves.png"}
TYPES = {REPORT_FILE: "text/html; charset=utf-8", "curves.png": "image/png"}


class ReportHandler(http.server.BaseHTTPRequestHandler):
    """GET of the report or the curves of one run directory; 404 for anything else."""

    def __init__(self, *args, run_dir: str, **kwargs):
        self.run_dir = run_dir
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
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
    server = make_server(run_dir, host, port)
    print(f"serving {os.path.join(run_dir, REPORT_FILE)} at "
          f"http://{host}:{server.server_address[1]}/ (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
