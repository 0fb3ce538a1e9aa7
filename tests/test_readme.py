"""The README's table of supported APIs must match what the router actually serves."""

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
