"""`kjbod serve` with a counting hook on DescribeLogDirs, for tests that check what clients asked for.

Run as `python counting_server.py RECORD_FILE serve -c server.properties`: every DescribeLogDirs request that
reaches the server's handler appends one JSON line to RECORD_FILE, `null` (all topics) or the request's
[[topic, [partitions]], ...], then the real handler answers.  Everything else is the real `kjbod` command.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from kjbod.broker import router
from kjbod.cli.main import main

DESCRIBE_LOG_DIRS = 35


def install(record_path: str) -> None:
    entries = router.registry()
    entry = entries.get(DESCRIBE_LOG_DIRS)
    if entry is None:
        return  # no handler yet: requests are refused as before
    real = entry.fn

    def counting(node, request, body):
        topics = None if body.topics is None else [[t.topic, sorted(t.partitions)] for t in body.topics]
        with open(record_path, "a") as f:
            f.write(json.dumps(topics) + "\n")
        return real(node, request, body)

    entries[DESCRIBE_LOG_DIRS] = dataclasses.replace(entry, fn=counting)


if __name__ == "__main__":
    install(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
