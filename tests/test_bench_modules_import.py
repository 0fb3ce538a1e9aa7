"""Every benchmark `make bench` runs imports (a module importing a helper another module renamed fails here, in
`make test`, instead of halfway through a bench run)."""

from __future__ import annotations

import importlib

import pytest

from tools.bench.__main__ import BENCHMARKS


@pytest.mark.parametrize("name", BENCHMARKS)
def test_the_benchmark_module_imports_and_has_run(name: str) -> None:
    module = importlib.import_module(f"tools.bench.{name}")
    assert callable(module.run)
