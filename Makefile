# kjbod: the two set-up commands are `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.install-stamp
CONFIG ?= config/server.properties
PYTEST_ARGS ?=
# Test files run on this many pytest-xdist workers, a whole file each (module-scoped clusters start once; the files
# that start processes go first: tests/conftest.py). 0 runs them in this process, one after another.
PYTEST_WORKERS ?= 2

.PHONY: install run test unit bench codegen check-codegen lint clean distclean

$(STAMP): pyproject.toml setup.py kjbod/storage/_recordscan.c kjbod/storage/_nativewrite.c tools/install_system_deps.sh \
		tests/compat/kafkajs/package-lock.json
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev,spark]' --config-settings editable_mode=compat
	KJBOD_NEED_JAVA=1 bash tools/install_system_deps.sh
	@# KafkaJS, exactly as locked, for tests/compat/test_kafkajs.py (which skips, saying why, where it is missing).
	@# Not needed to run kjbod: where npm cannot fetch it, install goes on and says so.
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/compat/kafkajs --no-audit --no-fund --loglevel=error >/dev/null \
		|| echo "kjbod: npm ci in tests/compat/kafkajs failed: the KafkaJS tests will skip" >&2; fi
	@touch $(STAMP)

install: $(STAMP)

run: install
	@test -f data/logs-1/meta.properties || $(VENV)/bin/kjbod format -c $(CONFIG)
	$(VENV)/bin/kjbod serve -c $(CONFIG) --log-format console

test: install check-codegen lint
	$(PY) -m pytest -q -rfEs -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

bench: install
	$(PY) -m tools.bench $(BENCH_ARGS)

codegen: install
	$(PY) -m tools.codegen

check-codegen: install
	$(PY) -m tools.codegen --check

lint: install
	$(VENV)/bin/ruff check kjbod tools tests
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy kjbod

clean:
	rm -rf data bench-out .pytest_cache .hypothesis

distclean: clean
	rm -rf $(VENV)
