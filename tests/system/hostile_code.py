"""Code that only an attack would import: importing it writes a marker file where
$ARL_TEST_MARKER says, so a test can tell that arl imported it."""

from __future__ import annotations

import os

_marker = os.environ.get("ARL_TEST_MARKER")
if _marker:
    with open(_marker, "w", encoding="utf-8") as f:
        f.write("imported\n")


def make(cfg):  # an env factory, as a checkpoint's env.name could name one
    raise RuntimeError("never called: importing this module is the attack")


async def run_agent(client, task):  # an agent function, as env.agent could name one
    raise RuntimeError("never called")
