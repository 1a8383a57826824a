"""The JSON-lines files a run writes (metrics.jsonl, samples.jsonl), read back: every line
that is a JSON object, with its text. A line that is not one (the last, cut short by a crash
or still being written) is passed over."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any


def json_rows(path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(line, object) for every line of `path` that holds a JSON object; none if there is no
    file."""
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue
            if isinstance(row, dict):
                yield line, row
