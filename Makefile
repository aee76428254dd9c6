# Attest: every target works from a fresh clone. `make help` lists them, with rough durations.
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
# When this make began (seconds since the epoch): `make test` reports how long it took in all.
MAKE_STARTED := $(shell date +%s)

.PHONY: help ports-free restart install install-dev proto lint-proto lint typecheck breaking deploy-check migrate estate demo run test test-unit test-grpc test-integration test-security test-integration-postgres eval bench clean

help: ## (<1 s) list the targets (rough durations, 2 CPUs, packages installed)
	@awk -v width="$$(tput cols 2>/dev/null || echo 80)" 'BEGIN { FS = ":.*## "; n = 0; nw = 0; tw = 0 } \
	  /^[a-z0-9-]+:.*## / { \
	    text = $$2; took = ""; \
	    if (match(text, /^\([^)]*\) /)) { took = substr(text, 2, RLENGTH - 3); text = substr(text, RLENGTH + 1) } \
	    names[n] = $$1; times[n] = took; texts[n++] = text; \
	    if (length($$1) > nw) nw = length($$1); if (length(took) > tw) tw = length(took) } \
	  END { indent = nw + tw + 4; room = width - indent; if (room < 30) room = 30; \
	    for (i = 0; i < n; i++) { \
	      line = sprintf("%-" nw "s  %-" tw "s  ", names[i], times[i]); used = 0; \
	      count = split(texts[i], words, " "); \
	      for (j = 1; j <= count; j++) { \
	        if (used > 0 && used + 1 + length(words[j]) > room) { print line; line = sprintf("%" indent "s", ""); used = 0 } \
	        line = line (used > 0 ? " " : "") words[j]; used += (used > 0 ? 1 : 0) + length(words[j]) } \
	      print line } }' $(MAKEFILE_LIST)

# Attest and what running it needs: `make demo` and `make run` install nothing more. The editable
# install puts the repository on the venv's path; attest-generated.pth puts gen/ beside it.
$(VENV)/.installed: pyproject.toml
	@echo "install: creating $(VENV) and installing Attest with what running it needs (~1 min the first time)"
	@$(PYTHON_BOOT) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e .
	@$(PY) -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_path("purelib"), "attest-generated.pth").write_text("$(CURDIR)/gen\n")'
	@touch $@

# The development tools on top (the dev extra in pyproject.toml), for the tests and checks.
$(VENV)/.dev-installed: pyproject.toml $(VENV)/.installed
	@echo "install: adding the development tools to $(VENV) (pyproject.toml's dev extra)"
	@$(PY) -m pip install -q -e '.[dev]'
	@touch $@

install: $(VENV)/.installed gen/.stamp ## (~1 min) .venv with Attest and what running it needs; generated code

install-dev: install $(VENV)/.dev-installed gen/.typed-stamp $(NODE_CONTRACT)/node_modules/.installed ## (~2 min) install, plus the dev tools and the Node contract test's npm packages

# The Node.js contract test's client libraries (tests/contract/node), exactly as locked.
$(NODE_CONTRACT)/node_modules/.installed: $(NODE_CONTRACT)/package-lock.json
	@command -v npm >/dev/null || { echo "error: npm is missing: install Node.js (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	@echo "install: the Node contract test's npm packages ($(NODE_CONTRACT))"
	@cd $(NODE_CONTRACT) && npm ci --no-audit --no-fund --loglevel=error >/dev/null
	@touch $@

gen/.stamp: $(PROTOS) $(VENV)/.installed
	@echo "generate: Python code from protos/ into gen/"
	@rm -rf gen && mkdir -p gen
	@$(PY) -m grpc_tools.protoc -Iprotos --python_out=gen --pyi_out=gen --grpc_python_out=gen $(PROTOS)
	@touch $@

# Typed stubs of the generated gRPC modules (*_pb2_grpc.pyi), which only mypy reads.
gen/.typed-stamp: gen/.stamp $(VENV)/.dev-installed
	@$(PY) -m grpc_tools.protoc -Iprotos --plugin=protoc-gen-mypy_grpc=$(VENV)/bin/protoc-gen-mypy_grpc \
	  --mypy_grpc_out=quiet:gen $(PROTOS)
	@touch $@

proto: gen/.stamp ## (~5 s) generate Python code from protos/ into gen/ (git-ignored)

lint-proto: install-dev ## (~5 s) buf lint (STANDARD rules)
	$(BUF) lint

lint: install-dev ## (~5 s) ruff check (rules in pyproject.toml's [tool.ruff])
	$(VENV)/bin/ruff check .

typecheck: install-dev ## (~1 min) mypy --strict on shared/, gateway/, services/ ([tool.mypy])
	$(VENV)/bin/mypy

breaking: install-dev ## (~10 s) buf breaking against the main branch (FILE rules)
	$(BUF) breaking --against '.git#branch=main'

deploy-check: install-dev ## (~10 s) validate deploy/ offline: kustomize, Kubernetes schemas, compose
	$(PY) deploy/check.py

migrate: install ## (~2 s) apply Alembic migrations to ATTEST_DATABASE_URL
	@$(PY) -m shared.db.migrate

estate: install ## (~5 s) (re)load the demo estate, anchored at now
	@$(PY) -m services.executor.estate load

demo: migrate estate ## (~30 s) start the services, print the sample answers, stop (~2 min fresh)
	@ATTEST_AUTH_TOKEN=$(DEMO_TOKEN) $(PY) -m gateway.launcher --questions demo/questions.txt $(REPLICA_ARGS)

run: ports-free migrate estate ## (~15 s) start the services on ports 50050-50055 and stay up (REPLICAS=executor=3)
	@ATTEST_AUTH_TOKEN=$(DEMO_TOKEN) $(PY) -m gateway.launcher --fixed-ports $(REPLICA_ARGS)

ports-free: install ## (<1 s) check that the ports of `make run` are free
	@$(PY) -m gateway.launcher check-ports

restart: ## (~5 s) restart one role of `make run`: make restart ROLE=executor
	@test -n "$(ROLE)" || { echo "error: name the role: make restart ROLE=executor" >&2; exit 2; }
	$(PY) -m gateway.launcher restart $(ROLE)

test: lint-proto lint typecheck deploy-check ## (~40 min) buf lint, ruff, mypy, deploy-check, then the whole test suite
	@echo "test: pytest over tests/ (unit, grpc, integration, security)"
	@$(PY) -m pytest -q; rc=$$?; \
	  took=$$(( $$(date +%s) - $(MAKE_STARTED) )); echo "make test: $$(( took / 60 )) min $$(( took % 60 )) s"; \
	  if [ $$rc -eq 5 ]; then echo "no tests collected" >&2; exit 1; fi; exit $$rc

test-unit: install-dev ## (~7 min) only the unit tests (no processes started)
	$(PY) -m pytest -q tests/unit

test-grpc: install-dev ## (~5 min) only the gRPC tests (each role's server, a scripted model)
	$(PY) -m pytest -q tests/grpc

test-integration: install-dev ## (~12 min) only the integration tests (real processes and servers)
	$(PY) -m pytest -q tests/integration

test-security: install-dev ## (~5 min) only the security suite (attacks over real processes, TLS on)
	$(PY) -m pytest -q tests/security

test-integration-postgres: install-dev ## (~11 min) the integration tests on a throwaway PostgreSQL
	ATTEST_TEST_DATABASE=postgresql $(PY) -m pytest -q tests/integration -m 'not generated_gate'

eval: install-dev ## (~3 min) scenario evaluation on the held-out estate (SEED=N: a generated set)
	$(PY) -m tests.eval.scenario_eval $(if $(SEED),--seed $(SEED))

.PHONY: e2e-llm
e2e-llm: install-dev ## (~10 min) a real model end to end: llama.cpp + Gemma 3 270M (first build: longer)
	bash tests/e2e/run_e2e_llm.sh

# Benchmark scripts (modules under tests/bench/), run in order; each prints a table and writes
# var/bench/<name>.json. Add a module here to add a benchmark.
BENCHMARKS := tests.bench.gatekeeper_bench tests.bench.chain_bench

bench: install-dev ## (~3 min) the benchmarks (timings, not tests); JSON under var/bench/
	@for bench in $(BENCHMARKS); do echo "== $$bench"; $(PY) -m $$bench || exit 1; done

clean: ## (<1 s) remove generated code, databases and logs (keeps .venv)
	rm -rf gen var
