# Shared Brain — the two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-external test-citus lint typecheck check proto clean image test-image dist docs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

## Serve on 127.0.0.1:50051 with an embedded PostgreSQL; writes a dev key to .brain/dev-key.
run: $(STAMP)
	BRAIN_DEV_KEY_FILE=$${BRAIN_DEV_KEY_FILE:-.brain/dev-key} $(BIN)/brain-server --log-format console

## Lint, type-check, install as users do (dist) and run the whole test suite (each worker
## starts its own PostgreSQL). dist builds and installs while the suite runs: the suite's
## tests/test_installed.py waits for it (tests/dist.py --alongside). Each test module goes
## whole to one worker (its module fixtures are made once), the longest modules first
## (tests/conftest.py LONGEST_FIRST), so that the short ones fill the end evenly.
## Bytecode is cached (into __pycache__, git-ignored) even where the environment sets
## PYTHONDONTWRITEBYTECODE: the suite starts hundreds of Python processes, and each would
## otherwise compile every module of the checkout again.
TEST_WORKERS ?= 2
test: $(STAMP) lint typecheck
	PYTHONDONTWRITEBYTECODE= $(BIN)/python tests/dist.py --alongside \
	  $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  --durations=15

## Build the sdist and the wheel, twine-check both, install each into a fresh venv outside the
## checkout with its dependencies (uv; `tests/dist.py --installer pip` to compare); the venvs
## are listed in .build/dist/installed.json for tests/test_installed.py.
dist: $(STAMP)
	$(BIN)/python tests/dist.py

## The deployment path (root; minutes): Debian's PostgreSQL 15 + pgvector built from source,
## the roles of docs/operations/deployment.md, migrate as the owner, brain-server over TLS as the confined role,
## then the isolation, authorization and lifecycle tests against it. Not part of `make test`;
## it installs packages on the host (apt-get; see deploy/external-postgres.sh).
test-external: $(STAMP)
	VENV=$(abspath $(VENV)) tests/external.sh

## The service on a Citus cluster (root; about 15 minutes): Citus built from source against
## Debian's PostgreSQL 15, a coordinator and two workers on loopback, migrate, distribute by
## tenant, tests/citus_checks.py, brain-server through the coordinator, the isolation,
## authorization, lifecycle, audit, review, knowledge, graph and plans tests there
## (CITUS_TESTS="tests/test_x.py ..." picks others), then a third worker joins and the shards
## move while a writer runs (tests/citus_rebalance.py). deploy/SCALING.md says what passes.
## Not part of `make test`.
test-citus: $(STAMP)
	VENV=$(abspath $(VENV)) tests/citus.sh

## The container image from deploy/Dockerfile, with buildah or docker (whichever is installed):
## `make image [BASE_IMAGE=python:3.11-slim] [IMAGE=shared-brain:<version>] [IMAGE_TOOL=buildah]`.
image:
	deploy/build-image.sh

## The image built on a local Debian base (mmdebstrap, podman, buildah) and run from its mounted
## file system: embedded and external PostgreSQL, health check, smoke run (root; minutes).
## Not part of `make test`.
test-image:
	tests/image.sh

lint: $(STAMP)
	$(BIN)/ruff check authz server clients tests setup.py docs/_hooks
	$(BIN)/ruff format --check authz server clients tests setup.py docs/_hooks

# mypy resolves packages by folder; mirror the installed layout (brain.* -> folders).
typecheck: $(STAMP)
	rm -rf .build/typecheck/brain && mkdir -p .build/typecheck/brain
	ln -s ../../../authz .build/typecheck/brain/authz
	ln -s ../../../server .build/typecheck/brain/server
	ln -s ../../../clients .build/typecheck/brain/clients
	ln -s ../../../clients/v1 .build/typecheck/brain/v1
	cd .build/typecheck && ../../$(BIN)/mypy --config-file ../../pyproject.toml -p brain.authz -p brain.server -p brain.clients

## The documentation site (docs/, mkdocs.yml) into .build/site; the gRPC reference is
## generated from protos/ and the client reference from docstrings at every build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## Regenerate clients/v1 from protos/ after editing a .proto file.
proto: $(STAMP)
	$(BIN)/python -m brain.clients.codegen

clean:
	rm -rf $(VENV) .build .pytest_cache .mypy_cache .ruff_cache
