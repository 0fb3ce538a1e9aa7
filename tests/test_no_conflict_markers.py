"""No file of the project keeps a merge conflict marker (one once reached README.md unnoticed)."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = {".venv", ".git", "build", "data", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
SUFFIXES = {".py", ".md", ".json", ".toml", ".c", ".sh", ".txt", ".cfg", ".ini", ".yaml", ".yml", ""}


def _files():
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP and not d.endswith(".egg-info") and not d.startswith("wt-")]
        for name in names:
            path = Path(top, name)
            if path.suffix in SUFFIXES:
                yield path


def test_no_merge_conflict_markers():
    found = []
    for path in _files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if line.startswith(("<<<<<<< ", ">>>>>>> ")) or line == "<<<<<<<" or line == ">>>>>>>":
                found.append(f"{path.relative_to(ROOT)}:{n}: {line[:40]}")
    assert not found, "merge conflict markers left in:\n" + "\n".join(found)
