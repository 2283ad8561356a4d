# Two commands do all the set-up on a fresh machine:
#   make run   - install what is missing of the runtime lock (requirements.txt), serve the front on
#                http://127.0.0.1:$(PORT) (devhorde behind it unless HORDE_URL is set; Redis for live streams unless
#                REDIS=off, started when none answers) with WORKERS processes (default 1)
#   make test  - install what is missing of the runtime, test and lint locks (requirements*.txt), run `make lint`,
#                start Redis if none answers on 127.0.0.1:6379, run the whole suite in parallel (pytest-xdist,
#                TEST_WORKERS workers: bin/test-workers) with `make realhorde` alongside (bin/test-suite)
#   make check - the edit-test loop: `make lint` and the unit and devhorde tests (in parallel), at the same time
#   make realhorde - the real-Horde lane (tests/realhorde) against ../shared/realhorde's real AI Horde, started and
#                stopped when it is not already running; one line says it was skipped when ../shared/realhorde is absent
#   make lint  - ruff check, ruff format --check and mypy --strict (configured in pyproject.toml)
# `make bench` runs the benchmarks under bench/.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
DEVHORDE_PORT ?= 7001
WORKERS ?= 1
REDIS ?= on
TEST_WORKERS ?= $(shell bin/test-workers)
export PORT DEVHORDE_PORT WORKERS REDIS TEST_WORKERS PYTEST_ARGS REALHORDE_ARGS

.PHONY: run test check check-tests lint bench install install-dev clean browser edge js realhorde

# The environment: a Python 3.12+ found by bin/find-python (PATH, then pyenv), a venv, the pinned requirements:
# `install` the runtime lock only (what `make run` serves with), `install-dev` the test and lint locks on top of it.
# bin/ensure-venv runs every time (it prints nothing when all is in place) and rebuilds a broken .venv, such as one
# left by a Ctrl-C during its creation, with one line saying so.
RUNTIME_LOCK := requirements.txt
DEV_LOCKS := $(RUNTIME_LOCK) requirements-test.txt requirements-lint.txt

install:
	@bin/ensure-venv $(VENV) $(RUNTIME_LOCK)

install-dev:
	@bin/ensure-venv $(VENV) $(DEV_LOCKS)

run: install
	@exec bin/run

# Lint before the main suite: a finding fails `make test` (and so CI) before the main suite starts (bin/test-suite runs
# it after starting the real-Horde lane, whose Horde takes 10-20 s to start: they share the two cores).
lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: install-dev browser edge js
	+@bin/test-suite

# Lint and the in-process tests (tests/unit, tests/devhorde: no uvicorn, no real Horde), both at once; each one's
# output is printed whole when it ends. PYTEST_ARGS go to pytest.
check: install-dev
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint check-tests

check-tests: install-dev
	@bin/with-redis bin/pytest-run "make check" tests/unit tests/devhorde -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The real-Horde lane: bin/realhorde-lane (REALHORDE_ARGS go to its pytest).
realhorde: install-dev
	@bin/realhorde-lane $(REALHORDE_ARGS)

# The browser test drives Debian's Chromium (Playwright never downloads a browser here); install it when missing
# and possible (root with apt-get), otherwise that test skips and says why.
browser:
	@bin/ensure-chromium

# The edge tests (tests/edge) run Debian's nginx in front of the front; install it when missing and possible (root
# with apt-get), otherwise those tests skip and say why.
edge:
	@bin/ensure-nginx

# The JavaScript clients the integration tests drive (tests/js: the Vercel AI SDK), installed from the lock file.
JS_STAMP := tests/js/node_modules/.package-lock.json

js: $(JS_STAMP)

$(JS_STAMP): tests/js/package.json tests/js/package-lock.json
	cd tests/js && npm ci --no-audit --no-fund --loglevel=error

bench: install-dev
	@bin/with-redis $(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache tests/js/node_modules
