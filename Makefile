# Attest: every target works from a fresh clone. `make help` lists them.
SHELL := /bin/bash
PYTHON_BOOT ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BUF := $(VENV)/bin/buf
PROTOS := $(shell find protos -name '*.proto')
NODE_CONTRACT := tests/contract/node
export ATTEST_DATABASE_URL ?= sqlite:///var/attest.db
export ATTEST_ESTATE_DATABASE_URL ?= sqlite:///var/estate.db
DEMO_TOKEN ?= attest-demo-token
# `make run REPLICAS=executor=3`: processes per role (the gateway spreads calls over them).
REPLICAS ?=
REPLICA_ARGS := $(if $(REPLICAS),--replicas $(REPLICAS))

.PHONY: help ports-free restart install proto lint-proto lint typecheck breaking deploy-check migrate estate demo run test test-unit test-grpc test-integration test-security test-integration-postgres eval bench clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 20

$(VENV)/.installed: pyproject.toml
	$(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed gen/.stamp $(NODE_CONTRACT)/node_modules/.installed ## create .venv and install Attest with its dev tools (and the Node contract test's npm packages)

# The Node.js contract test's client libraries (tests/contract/node), exactly as locked.
$(NODE_CONTRACT)/node_modules/.installed: $(NODE_CONTRACT)/package-lock.json
	@command -v npm >/dev/null || { echo "error: npm is missing: install Node.js (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	cd $(NODE_CONTRACT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

gen/.stamp: $(PROTOS) $(VENV)/.installed
	rm -rf gen && mkdir -p gen
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=gen --pyi_out=gen --grpc_python_out=gen \
	  --plugin=protoc-gen-mypy_grpc=$(VENV)/bin/protoc-gen-mypy_grpc --mypy_grpc_out=gen $(PROTOS)   # typed stubs for make typecheck
	$(PY) -m pip install -q --no-deps -e .   # registers gen/ (the attest.* packages) on the venv's path
	touch $@

proto: gen/.stamp ## generate Python code from protos/ into gen/ (git-ignored)

lint-proto: install ## buf lint (STANDARD rules)
	$(BUF) lint

lint: install ## ruff check (rules in pyproject.toml's [tool.ruff]; gen/ excluded)
	$(VENV)/bin/ruff check .

typecheck: install ## mypy --strict on shared/, gateway/ and services/ (settings in pyproject.toml's [tool.mypy])
	$(VENV)/bin/mypy

breaking: install ## buf breaking against the main branch (FILE rules)
	$(BUF) breaking --against '.git#branch=main'

deploy-check: install ## validate deploy/ offline: kustomize builds, Kubernetes schemas, project rules, compose
	$(PY) deploy/check.py

migrate: install ## apply Alembic migrations to ATTEST_DATABASE_URL
	$(PY) -m shared.db.migrate

estate: install ## (re)load the demo estate into ATTEST_ESTATE_DATABASE_URL, anchored at now
	$(PY) -m services.executor.estate load

demo: migrate estate ## start the six services, ask the sample questions, print the answers, stop (REPLICAS= as for run)
	ATTEST_AUTH_TOKEN=$(DEMO_TOKEN) $(PY) -m gateway.launcher --questions demo/questions.txt $(REPLICA_ARGS)

run: ports-free migrate estate ## start the six services on ports 50050-50055 (or ATTEST_<ROLE>_PORT) and stay up, restarting a role that ends (Ctrl-C stops); REPLICAS=executor=3,verifier=2 runs several of a role
	ATTEST_AUTH_TOKEN=$(DEMO_TOKEN) $(PY) -m gateway.launcher --fixed-ports $(REPLICA_ARGS)

ports-free: install ## check that the fixed ports of `make run` are free (one line per taken port, exit 1)
	@$(PY) -m gateway.launcher check-ports

restart: ## restart one role of the running `make run`: make restart ROLE=executor (a replica: ROLE=executor-2)
	@test -n "$(ROLE)" || { echo "error: name the role: make restart ROLE=executor" >&2; exit 2; }
	$(PY) -m gateway.launcher restart $(ROLE)

test: lint-proto lint typecheck deploy-check ## buf lint, ruff, mypy, then the whole test suite (pytest's "no tests collected" fails too)
	$(PY) -m pytest -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected" >&2; exit 1; fi; exit $$rc

test-unit: install ## only the unit tests (no processes started)
	$(PY) -m pytest -q tests/unit

test-grpc: install ## only the gRPC tests (each role's real server, models scripted over real HTTP)
	$(PY) -m pytest -q tests/grpc

test-integration: install ## only the integration tests (real processes and servers)
	$(PY) -m pytest -q tests/integration

test-security: install ## only the security suite (attacks over real processes, TLS on)
	$(PY) -m pytest -q tests/security

test-integration-postgres: install ## the integration tests with the audit store on a throwaway PostgreSQL (the generated-set gate judges answers, not the store: make test runs it)
	ATTEST_TEST_DATABASE=postgresql $(PY) -m pytest -q tests/integration -m 'not generated_gate'

eval: install ## scenario evaluation on the held-out estate (tests/scenarios/): every case in both modes, table + score, tests/eval/results/latest.json; SEED=N or SEED=random runs a generated set instead (tests/scenarios/generator.py, committed seeds in tests/scenarios/seeds.txt) and adds per-class scores
	$(PY) -m tests.eval.scenario_eval $(if $(SEED),--seed $(SEED))

.PHONY: e2e-llm
e2e-llm: install ## a real model end to end: llama.cpp server + Gemma 3 270M behind every role (slow)
	bash tests/e2e/run_e2e_llm.sh

# Benchmark scripts (modules under tests/bench/), run in order; each prints a table and writes
# var/bench/<name>.json. Add a module here to add a benchmark.
BENCHMARKS := tests.bench.gatekeeper_bench tests.bench.chain_bench

bench: install ## run the benchmarks (timings, not tests): tables on stdout, JSON under var/bench/
	@for bench in $(BENCHMARKS); do echo "== $$bench"; $(PY) -m $$bench || exit 1; done

clean: ## remove generated code, databases and logs (keeps .venv)
	rm -rf gen var
