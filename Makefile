# Two commands do all the set-up: `make demo` and `make test`.
# `make test-fast` leaves out the end-to-end tests (Ray, `spanlift` processes) for the edit loop.
# Both create .venv when it is missing and install the package into it, with every extra the tests
# exercise (k-diffusion's samplers and ImageReward included), so no test is skipped for a package
# `make` could have installed.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo demo-full test test-fast docs-check lint format install clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,diffusers,cluster,kdiffusion,imagereward]'
	touch $(STAMP)

install: $(STAMP)

# The demo sweep on local Ray (12 configurations, ~3 min on 2 cores), then its leaderboard and
# plot; `make demo-full` runs the full digits grid (23 configurations). --restart: running it
# again takes configurations that already finished from MLflow instead of refitting them.
demo: $(STAMP)
	$(BIN)/spanlift sweep sweeps/demo.yaml --restart
	$(BIN)/spanlift leaderboard --experiment demo --plot runs/demo-leaderboard.png

demo-full: $(STAMP)
	$(BIN)/spanlift sweep sweeps/digits_nfe.yaml --restart
	$(BIN)/spanlift leaderboard --experiment digits-nfe --plot runs/digits-nfe-leaderboard.png

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Every test in two processes (2 cores), a file's tests in one process (its module fixtures, e.g. a
# sweep several tests read, run once); each test process, and each process a test starts, runs one
# torch thread. Three test processes take as long as two (the suite is CPU-bound: most of it is
# the processes the end-to-end tests start, Ray's among them). Times: README.md, "Results".
test: lint
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# The unit tests alone, no Ray and no `spanlift` processes: the edit loop.
test-fast: lint
	$(BIN)/python -m pytest -q -n 2 -m "not e2e"

# Every `cpu` command line of README.md and docs/ as written, in order, in a temporary folder on a
# fresh store: its exit status, what it names, its time against the time the docs state (tags:
# tools/docs_lines.py). `.ci/run` runs it after `make test`. One file or line:
# `$(BIN)/python -m tools.docs_check --only docs/nowcasting.md`; the tags: `--list`.
docs-check: $(STAMP)
	$(BIN)/python -m tools.docs_check

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
