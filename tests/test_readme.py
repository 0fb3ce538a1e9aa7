"""The README against the program: its table of supported APIs, and the output it shows for commands."""

import json
import re
from pathlib import Path

from kjbod.broker.router import registry

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_api_table_matches_handlers():
    text = README.read_text(encoding="utf-8")
    block = re.search(r"<!-- api-table.*?-->(.*?)<!-- /api-table -->", text, re.S)
    assert block, "README.md lost its api-table markers"
    rows = re.findall(r"^\| (\w+) \| (\d+) \| (\d+)-(\d+) \|$", block.group(1), re.M)
    documented = {int(k): (name, int(lo), int(hi)) for name, k, lo, hi in rows}
    served = {e.api_key: (e.name, e.min_version, e.max_version) for e in registry().values()}
    assert documented == served


def _block_after(text: str, marker: str, fence: str) -> str:
    """The first fenced block of kind `fence` after `marker` in the README."""
    start = text.index(marker)
    found = re.compile(rf"```{fence}\n(.*?)```", re.S).search(text, start)
    assert found, f"README.md lost the {fence} block after {marker!r}"
    return found.group(1)


def _described() -> dict:
    """`kjbod log-dirs describe`'s document for one broker with one dir and one replica, as the CLI builds it."""
    from kjbod.admin.types import LogDirInfo, LogDirsByBroker, ReplicaInfo
    from kjbod.cli.log_dirs import describe_document

    result = LogDirsByBroker()
    result[1] = [LogDirInfo(1, "/srv/kjbod/data/logs-1", None, None, 100, 50,
                            [ReplicaInfo("audit", 0, 629907, 0, False)], state="online", recent_latency_ms=2)]
    return describe_document(result)


def test_readme_log_dirs_json_example_has_the_fields_describe_prints():
    # The README documents `--json` field by field: a field the CLI prints and the README does not show (or the
    # other way round) misleads whoever writes a program against it.
    example = json.loads(_block_after(README.read_text(encoding="utf-8"), "`--json` prints the same thing", "json"))
    printed = _described()
    assert example.keys() == printed.keys()
    assert example["brokers"][0].keys() == printed["brokers"][0].keys()
    example_dir, printed_dir = example["brokers"][0]["log_dirs"][0], printed["brokers"][0]["log_dirs"][0]
    assert example_dir.keys() == printed_dir.keys()
    assert example_dir["partitions"][0].keys() == printed_dir["partitions"][0].keys()


def test_readme_log_dirs_table_has_the_columns_describe_prints():
    from kjbod.cli.log_dirs import render_table

    example = _block_after(README.read_text(encoding="utf-8"), "### See what is where", "console")
    printed = render_table(_described())
    headers = [line.split() for line in printed.splitlines() if line.strip().startswith(("LOG DIR", "PARTITION"))]
    shown = [line.split() for line in example.splitlines() if line.strip().startswith(("LOG DIR", "PARTITION"))]
    assert shown == headers
