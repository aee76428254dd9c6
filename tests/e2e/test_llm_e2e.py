"""A real model end to end: the six services with every model role pointed at one real
OpenAI-compatible server (`make e2e-llm` starts llama.cpp's server with a tiny Gemma 3 model).

The model talks nonsense, so nothing about the content is asserted, only what must hold whatever
a model says: every run ends in a typed outcome; a claim reaches the answer only through the
gatekeeper's verified projection; no invocation id, raw path or excerpt the model made up
appears in the answer; the audit names the model, the prompt versions and the tokens spent.

Not part of `make test` (pytest's default run ignores tests/e2e): it needs the server, whose
address comes from ATTEST_E2E_LLM_BASE_URL (and the model name from ATTEST_E2E_LLM_MODEL).
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.launcher import Cluster
from services.executor.estate import load_estate
from shared.db.engine import make_engine, make_session_factory
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore
from shared.proto_convert import enum_number, spec_value

REPO_ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = [q.strip() for q in (REPO_ROOT / "demo" / "questions.txt").read_text(encoding="utf-8").splitlines() if q.strip()]
MODES = ("MULTI_AGENT", "SINGLE_REACT")
TOKEN = "e2e-llm-token"
TYPED_FALLBACKS = {"EVIDENCE_VALIDATION_FAILED", "SEMANTIC_UNSUPPORTED", "SEMANTIC_UNAVAILABLE",
                   "MISSING_REQUIRED_CONTEXT", "INSUFFICIENT_EVIDENCE", "PRE_VERIFICATION", "UNKNOWN_SERVICE",
                   "AGENT_UNAVAILABLE", "NO_VERIFIED_PROGRESS"}
VERDICTS = {"PASS", "LOW_CONFID", "REJECT"}
# The roles whose model runs on every path of each mode (the others may be skipped by a fallback).
ALWAYS_CALLED = {"MULTI_AGENT": ("planner", "executor"), "SINGLE_REACT": ("executor",)}
EMBEDDED_PROMPTS = {"planner.embedded", "executor.embedded", "verifier.embedded", "composer.templates"}
_CITATION = re.compile(r"\[证据: ([^\]]*)\]")
_CITED_CALL = re.compile(r"(?P<tool>[a-z_]+) #(?P<id>\d+)(?: (?P<path>[^；\]]+))?")
_QUOTED = re.compile(r"「([^」]+)」")
_INVOCATION_REF = re.compile(r"(?<![\w.])(?:invocation[_ ]?(?:id)?|#)\s*(\d+)", re.IGNORECASE)


def _require(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        pytest.fail(f"{name} is not set: run `make e2e-llm`, which starts the model server", pytrace=False)
    return value


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base_url = _require("ATTEST_E2E_LLM_BASE_URL")
    model = _require("ATTEST_E2E_LLM_MODEL")
    root = tmp_path_factory.mktemp("e2e-llm")
    database_url = f"sqlite:///{root / 'attest.db'}"
    estate_url = f"sqlite:///{root / 'estate.db'}"
    upgrade(database_url)
    load_estate(estate_url, REPO_ROOT / "demo" / "estate", anchor=datetime.now(UTC))
    env = {
        "ATTEST_DATABASE_URL": database_url,
        "ATTEST_ESTATE_DATABASE_URL": estate_url,
        "ATTEST_AUTH_TOKEN": TOKEN,
        # Every role on the one real server, globally (ATTEST_<ROLE>_MODEL_* would override per role).
        "ATTEST_MODEL_PROVIDER": "openai",
        "ATTEST_MODEL_BASE_URL": base_url,
        "ATTEST_MODEL_MODEL": model,
        "ATTEST_MODEL_API_KEY": "not-needed",
        "ATTEST_MODEL_JSON_SCHEMA_FORMAT": os.environ.get("ATTEST_E2E_LLM_JSON_SCHEMA_FORMAT", "true"),
        "ATTEST_MODEL_MAX_TOKENS": os.environ.get("ATTEST_E2E_LLM_MAX_TOKENS", "256"),
        "ATTEST_MODEL_TIMEOUT_SECONDS": os.environ.get("ATTEST_E2E_LLM_TIMEOUT_SECONDS", "180"),
        "ATTEST_MODEL_MAX_TOOL_STEPS": os.environ.get("ATTEST_E2E_LLM_MAX_TOOL_STEPS", "2"),
        # A tiny model's nonsense is not worth a second try; technical retries are tested with the
        # scripted server. One attempt per call keeps a run to a few minutes on two cores.
        "ATTEST_MODEL_MAX_ATTEMPTS": os.environ.get("ATTEST_E2E_LLM_MAX_ATTEMPTS", "1"),
        "ATTEST_SEMANTIC_GUARD_MAX_ATTEMPTS": os.environ.get("ATTEST_E2E_LLM_MAX_ATTEMPTS", "1"),
        "ATTEST_SEMANTIC_GUARD_ATTEMPT_TIMEOUT_SECONDS": "180",
        "ATTEST_SEMANTIC_GUARD_TOTAL_TIMEOUT_SECONDS": "360",
        # One local model answers one request at a time: a run takes minutes, not seconds.
        "ATTEST_DIAGNOSIS_TIMEOUT_SECONDS": os.environ.get("ATTEST_E2E_LLM_RUN_TIMEOUT_SECONDS", "1800"),
    }
    with Cluster(env, log_dir=root / "logs") as running:
        gateway_addr = running.start(timeout=120)
        yield {"gateway": gateway_addr, "database_url": database_url, "model": model, "logs": root / "logs"}


def _questions() -> list[str]:
    limit = int(os.environ.get("ATTEST_E2E_LLM_QUESTIONS", "0") or 0)
    return QUESTIONS[:limit] if limit > 0 else QUESTIONS


@pytest.fixture(scope="module")
def runs(cluster):
    """Every sample question in both modes, asked once; each test checks one property of all runs."""
    results = []
    store = RunStore(make_session_factory(make_engine(cluster["database_url"])))
    with grpc.insecure_channel(cluster["gateway"]) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        for mode in MODES:
            for question in _questions():
                response = stub.Diagnose(
                    gateway_pb2.DiagnoseRequest(query=question, mode=enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, mode),
                                                client_label="e2e-llm"),
                    timeout=float(os.environ.get("ATTEST_E2E_LLM_RUN_TIMEOUT_SECONDS", "1800")) + 60,
                    metadata=(("authorization", f"Bearer {TOKEN}"),),
                )
                run = store.get_run(response.run_id)
                results.append((mode, question, response, run))
                evaluation = run["self_evaluation"].get("verifier_evaluation", {})
                print(f"[{mode}] {question} -> {response.status} "
                      f"{spec_value(enums_pb2.ReleaseOutcome.DESCRIPTOR, response.release_outcome)} "
                      f"{spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict)} "
                      f"{spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type)} "
                      f"model_calls={json.dumps(evaluation.get('model_calls', {}), ensure_ascii=False)}")
    return results


def test_every_run_ends_in_a_typed_outcome(runs):
    assert len(runs) == len(MODES) * len(_questions())
    for mode, question, response, run in runs:
        where = f"[{mode}] {question}"
        assert response.status in ("COMPLETED", "FALLBACK"), where
        assert run["status"] == response.status and run["finished_at"], where
        outcome = spec_value(enums_pb2.ReleaseOutcome.DESCRIPTOR, response.release_outcome)
        verdict = spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict)
        fallback = spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type)
        assert outcome in ("SUCCESS", "FALLBACK"), where
        if outcome == "FALLBACK":
            assert fallback in TYPED_FALLBACKS, where
        else:
            assert verdict in VERDICTS and fallback is None, where
        assert response.answer.strip(), where


def _invocations(run: dict) -> dict[int, dict]:
    return {inv["invocation_id"]: inv for inv in run["invocations"]}


def _evidence_texts(invocation: dict) -> dict[str, str]:
    refs = (invocation.get("retrieval_details") or {}).get("evidence_refs") or []
    return {ref["raw_path"]: ref.get("text", "") for ref in refs}


def _verified_claims(run: dict) -> list[dict]:
    evaluation = run["self_evaluation"].get("verifier_evaluation", {})
    return (evaluation.get("verified_executor_output") or {}).get("claims", [])


def test_no_claim_reaches_the_answer_without_passing_the_gatekeeper(runs):
    """Multi-agent: every citation in the answer is a binding of the verified projection (the
    claims that passed the gatekeeper), and a run without one cites nothing. The composer's model
    may rephrase a claim's words, never its citation."""
    checked = 0
    for mode, question, response, run in runs:
        if mode != "MULTI_AGENT":
            continue  # single-ReAct's projection is the guard snapshot: see the next test
        where = f"[{mode}] {question}"
        claims = _verified_claims(run)
        verified = {
            (binding.get("tool_name"), binding.get("source_invocation_id"), binding.get("raw_path") or None)
            for claim in claims for binding in claim.get("evidence_bindings", [])
        }
        citations = [cited for match in _CITATION.finditer(response.answer)
                     for cited in _CITED_CALL.finditer(match.group(1))]
        if not claims:
            assert not citations, f"{where}: a citation without a verified projection: {response.answer!r}"
        for cited in citations:
            key = (cited["tool"], int(cited["id"]), (cited["path"] or "").strip() or None)
            assert key in verified, f"{where}: {key} is not a binding of a verified claim"
        checked += 1
    assert checked == len(_questions())


def _normal(text: str) -> str:
    return " ".join(text.split()).rstrip("…")


def test_nothing_the_model_invented_appears_in_the_answer(runs):
    """Invocation ids, raw paths and quoted excerpts in the answer all exist in this run."""
    for mode, question, response, run in runs:
        where = f"[{mode}] {question}"
        invocations = _invocations(run)
        claim_texts = _normal(" ".join(claim.get("claim_text", "") for claim in _verified_claims(run)))
        all_evidence = _normal(" ".join(text for inv in invocations.values() for text in _evidence_texts(inv).values()))
        for citation in _CITATION.finditer(response.answer):
            for cited in _CITED_CALL.finditer(citation.group(1)):
                invocation = invocations.get(int(cited["id"]))
                assert invocation is not None, f"{where}: invocation #{cited['id']} is not this run's"
                assert invocation["tool_name"] == cited["tool"], where
                if cited["path"]:
                    assert cited["path"].strip() in _evidence_texts(invocation), f"{where}: {cited['path']}"
        for quoted in map(_normal, _QUOTED.findall(response.answer)):
            assert quoted in claim_texts or quoted in all_evidence or quoted in question, f"{where}: 「{quoted}」"
        for number in _INVOCATION_REF.findall(response.answer):
            assert int(number) in invocations, f"{where}: #{number} is not an invocation of this run"


def test_the_audit_records_the_model_prompt_versions_and_token_usage(runs, cluster):
    for mode, question, _response, run in runs:
        where = f"[{mode}] {question}"
        evaluation = run["self_evaluation"]["verifier_evaluation"]
        prompts = {p["role"]: p for p in evaluation["prompt_audit"]["prompts"]}
        calls = evaluation["model_calls"]
        for role in ALWAYS_CALLED[mode]:
            assert prompts[role]["name"] not in EMBEDDED_PROMPTS and prompts[role]["version"], f"{where}: {role}"
            call = calls[role]
            assert (call["provider"], call["model"]) == ("openai", cluster["model"]), f"{where}: {role}"
            assert call["attempts"] >= 1, f"{where}: {role}"
        for role, call in calls.items():
            assert call["provider"] == "openai" and call["model"] == cluster["model"], f"{where}: {role}"
            usage = call["token_usage"]
            assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], f"{where}: {role}"
        # At least one call of the run was answered, and the server's usage was recorded.
        assert sum(call["token_usage"]["prompt_tokens"] for call in calls.values()) > 0, where
