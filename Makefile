# gpucarve developer entry points. Everything installs into .venv on first use, so the two
# quick-start commands work on a machine that has only python3 (>= 3.11) and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
EXAMPLE ?= src/gpucarve/data/examples/three-teams.yaml

.PHONY: demo test lint typecheck layers unit venv clean testenv axe

$(STAMP): pyproject.toml
	@echo "first use: installing gpucarve and its dependencies into $(VENV) (a few minutes; once)"
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,ray]'
	touch $@

venv: $(STAMP)

## The main job: validate the example policy, print its cluster, and simulate it
## (comparison printed; out/results.json, out/report.html and out/dashboard.html written).
demo: $(STAMP)
	$(BIN)/gpucarve validate $(EXAMPLE)
	$(BIN)/gpucarve cluster summary $(EXAMPLE)
	$(BIN)/gpucarve simulate --policy $(EXAMPLE)

## The whole test suite: lint, format, types, layering, then every test.
test: lint typecheck layers unit

lint: $(STAMP)
	$(BIN)/ruff check src tests tools bench
	$(BIN)/ruff format --check src tests tools bench

typecheck: $(STAMP)
	$(BIN)/mypy

layers: $(STAMP)
	$(BIN)/lint-imports

## Real etcd, kube-apiserver and kwok for the integration tests, built from their Go modules
## once per user (minutes the first time; cached outside the clone).
testenv:
	tools/testenv.sh >/dev/null

## axe-core for the dashboard's accessibility test (npm, once per user, cached outside the clone).
axe:
	tools/axe.sh >/dev/null

unit: $(STAMP) testenv axe
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .import_linter_cache
