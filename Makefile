# The two commands a newcomer needs: `make run` and `make test`.
# Everything else is here for developers and CI.

PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The locked versions (requirements/lock.py writes and checks them): `make install`
# installs exactly these, hash-checked; `make lock` refreshes them from pyproject.toml.
LOCK := requirements/platform-dev.txt
LOCKS := $(LOCK) requirements/platform.txt requirements/client.txt
CLIENT := clients/python
LOCK_TOOLS := $(VENV)/lock-tools
LOCK_ARGS ?=
# Reinstall when pyproject.toml or a lock changes. The client and schedctl
# ($(CLIENT)) go in after the platform with --no-deps: requirements/client.txt is
# resolved within $(LOCK), so everything the client needs is already there, locked.
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml $(CLIENT)/pyproject.toml $(LOCKS) | cksum | cut -d' ' -f1)
EMBED := $(BIN)/python -m config.embedded run --
PYTEST_ARGS ?=

.PHONY: install lock lock-check docs run test test-fast test-system lint format typecheck migrations-check check-deploy web worker worker-long beat bench chaos clean-data

$(STAMP): pyproject.toml $(CLIENT)/pyproject.toml $(LOCKS)
	@$(PY) -c 'import sys; sys.exit("Python 3.11+ is required (found %s)" % sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	$(PY) requirements/lock.py check
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --require-hashes -r $(LOCK)
	$(BIN)/pip install -q --disable-pip-version-check --no-deps --no-build-isolation .
	$(BIN)/pip install -q --disable-pip-version-check --no-deps --no-build-isolation ./$(CLIENT)
	$(BIN)/python requirements/lock.py verify-env $(LOCK)
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

## Re-resolve the locks after a change to pyproject.toml's dependencies, keeping
## every locked version that still fits; LOCK_ARGS=--upgrade takes the newest of
## everything, LOCK_ARGS="--upgrade-package NAME" of one. Commit the lock files.
lock:
	test -x $(LOCK_TOOLS)/bin/uv || { $(PY) -m venv $(LOCK_TOOLS) && \
		$(LOCK_TOOLS)/bin/pip install -q --disable-pip-version-check --require-hashes -r requirements/tools.txt; }
	$(PY) requirements/lock.py compile --uv $(LOCK_TOOLS)/bin/uv $(LOCK_ARGS)

## Fails when pyproject.toml's dependencies changed without `make lock` (no network).
lock-check:
	$(PY) requirements/lock.py check

## The docs site into docs/_build/html (open index.html). Warnings are errors (-W) and
## every cross-reference must resolve (-n): a broken link or #anchor between pages fails.
## The generated reference pages (docs/_ext) are rewritten from the code on every build.
docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -n -b html docs docs/_build/html

## The whole platform (web + beat + workers) on the embedded PostgreSQL and
## Redis unless DATABASE_URL / CELERY_BROKER_URL are set. Ctrl-C stops all.
run: $(STAMP)
	$(EMBED) $(BIN)/python manage.py run_platform

## The whole test suite, against the servers the env URLs name, else embedded ones:
## the main tier on SUITE_WORKERS pytest-xdist workers, then the system tier one test at
## a time, then the accounting (every collected test reported exactly once); see
## tests/tiers.py. PYTEST_ARGS go to pytest in each tier (e.g. -k calendar, -x).
test: $(STAMP)
	$(EMBED) $(BIN)/python -m tests.tiers all $(PYTEST_ARGS)

## The main tier alone (unit and integration, in parallel): the edit-test loop.
test-fast: $(STAMP)
	$(EMBED) $(BIN)/python -m tests.tiers main $(PYTEST_ARGS)

## The system tier alone (chaos, bench smokes, DST time travel, schemathesis, make run).
test-system: $(STAMP)
	$(EMBED) $(BIN)/python -m tests.tiers system $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	$(EMBED) $(BIN)/mypy config core tenants dispatch console bench clients/python/scheduler_client

migrations-check: $(STAMP)
	$(EMBED) $(BIN)/python manage.py makemigrations --check --dry-run

check-deploy: $(STAMP)
	SECRET_KEY=check-deploy-$$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n') DJANGO_SETTINGS_MODULE=config.production \
		PLATFORM_URL=$${PLATFORM_URL:-https://scheduler.example.com} \
		$(EMBED) $(BIN)/python manage.py check --deploy --fail-level WARNING

web: $(STAMP)
	$(EMBED) $(BIN)/python manage.py runserver 127.0.0.1:8000

worker: $(STAMP)
	$(EMBED) $(BIN)/celery -A config worker -Q high.short,default.short,low.short -n short@%h

worker-long: $(STAMP)
	$(EMBED) $(BIN)/celery -A config worker -Q high.long,default.long,low.long -n long@%h

beat: $(STAMP)
	$(EMBED) $(BIN)/python manage.py beat

## Benchmarks on a data folder of their own (embedded servers unless URLs are set):
## `manage.py bench all` — limits first, then every bench, one combined table and
## bench-results.json. Sizes: make bench BENCH_N=20000 BENCH_API_ROWS=10000000 ...
BENCH_LIMITS_N ?= 20000
BENCH_NOOP_N ?= 5000
BENCH_N ?= 10000
BENCH_BEATS ?= 2
BENCH_RATES ?= 1000,2000,5000
BENCH_SECONDS ?= 30
BENCH_E2E_N ?= 2000
BENCH_WORKERS ?= 1
BENCH_CONCURRENCY ?= 2
BENCH_SMALL ?= 10000
BENCH_LARGE ?= 1000000
BENCH_API_SCHEDULES ?= 2000
BENCH_API_ROWS ?= 1000000
BENCH_FLATTEN_N ?= 10000
BENCH_CRON_N ?= 100000
BENCH_SCALING_BEATS ?= 1,2,4
BENCH_JITTER ?= 30
BENCH_ARGS ?=
bench: $(STAMP)
	DATA_DIR=$${DATA_DIR:-.data-bench} $(EMBED) sh -c '$(BIN)/python manage.py migrate -v0 && \
		$(BIN)/python manage.py bench all \
			--limits-n $(BENCH_LIMITS_N) --limits-noop-n $(BENCH_NOOP_N) \
			--burst-n $(BENCH_N) --burst-beats $(BENCH_BEATS) \
			--cronburst-n $(BENCH_CRON_N) --cronburst-beats $(BENCH_BEATS) \
			--scaling-n $(BENCH_CRON_N) --scaling-beats $(BENCH_SCALING_BEATS) \
			--steady-rates $(BENCH_RATES) --steady-seconds $(BENCH_SECONDS) --steady-beats $(BENCH_BEATS) \
			--e2e-n $(BENCH_E2E_N) --e2e-workers $(BENCH_WORKERS) --e2e-concurrency $(BENCH_CONCURRENCY) \
			--scale-small $(BENCH_SMALL) --scale-large $(BENCH_LARGE) \
			--api-schedules $(BENCH_API_SCHEDULES) --api-rows $(BENCH_API_ROWS) \
			--flatten-n $(BENCH_FLATTEN_N) --flatten-jitter $(BENCH_JITTER) --flatten-beats $(BENCH_BEATS) \
			$(BENCH_ARGS)'

## Chaos suite: beats and workers killed, paused and crashed under a workload;
## prints the figures and writes chaos-results.json. DURATION=1800 for a soak
## (random nemesis every 1-3 min; NEMESIS_EVERY=lo-hi, CHAOS_BROKER=rabbitmq, CHAOS_SEED).
DURATION ?= 0
chaos: $(STAMP)
	DURATION=$(DURATION) $(EMBED) $(BIN)/pytest -m chaos tests/chaos -q -s $(PYTEST_ARGS)

clean-data:
	test -x $(BIN)/python && $(BIN)/python -m config.embedded wipe || rm -rf .data
