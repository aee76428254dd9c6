"""`attest gatekeeper-check FILE` as a person runs it: a subprocess of the `attest` CLI, input from a
file or stdin, the answer as one JSON object on stdout, exit 0 for any readable input of the
right shape and exit 2 with one line on stderr otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.gatekeeper.engine import check_executor_output
from shared.core.contracts import ToolInvocation

REPO_ROOT = Path(__file__).resolve().parents[2]
OUTPUT_KEYS = ["parse_status", "route", "verdict_ceiling", "gatekeeper_result", "verified_executor_output", "verified_evidence"]
METRIC_TEXT = "2026-11-29T10:35:00Z payment-service cpu_usage=92% (5m avg)"


def run_cli(argument: str, stdin: bytes | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "gatekeeper-check", argument],
        input=stdin, capture_output=True, cwd=REPO_ROOT, timeout=60, env={**os.environ, **(env or {})},
    )


def document(excerpt: str = "cpu_usage=92%", invocation_id: int = 12, **extra) -> dict:
    return {
        "run_id": "run-1",
        "invocations": [
            {"invocation_id": 12, "run_id": "run-1", "tool_name": "query_metrics", "tool_call_id": "c-1", "lifecycle": "READY",
             "evidence_status": "EVIDENCE_FOUND", "agent_result": "{}",
             "retrieval_details": {"evidence_refs": [{"raw_path": "series[0].points[41]", "text": METRIC_TEXT}]}},
            {"invocation_id": 99, "run_id": "run-0", "tool_name": "query_metrics", "lifecycle": "READY",
             "evidence_status": "EVIDENCE_FOUND", "retrieval_details": {"evidence_refs": [{"raw_path": "series[0].points[41]", "text": METRIC_TEXT}]}},
        ],
        "executor_output": {
            "answer_version": "executor_evidence_v2",
            "claims": [{"claim_id": "c1", "claim_type": "symptom", "claim_text": "payment-service 的 CPU 达到 92%", "support_level": "direct",
                        "evidence_bindings": [{"source_type": "metrics", "tool_name": "query_metrics", "source_invocation_id": invocation_id,
                                               "raw_path": "series[0].points[41]", "evidence_excerpt": excerpt}]}],
            "hypotheses": [], "recommended_actions": [], "missing_info": [],
        },
        **extra,
    }


def stdout_json(completed: subprocess.CompletedProcess) -> dict:
    assert completed.returncode == 0, completed.stderr.decode()
    result = json.loads(completed.stdout.decode("utf-8"))
    assert list(result) == OUTPUT_KEYS
    return result


def test_a_genuine_citation_passes_from_a_file(tmp_path):
    path = tmp_path / "input.json"
    path.write_text(json.dumps(document(), ensure_ascii=False), encoding="utf-8")
    completed = run_cli(str(path))
    result = stdout_json(completed)
    assert completed.stderr == b""
    assert (result["parse_status"], result["route"], result["verdict_ceiling"]) == ("valid", "VERIFIER", "PASS")
    assert result["gatekeeper_result"]["status"] == "pass" and result["gatekeeper_result"]["rule_set_version"]
    assert result["verified_evidence"] == [{"claim_id": "c1", "source_invocation_id": 12, "tool_name": "query_metrics",
                                             "raw_path": "series[0].points[41]", "matched_text": METRIC_TEXT,
                                             "facts": None}]
    assert result["verified_executor_output"]["claims"][0]["claim_text"] == "payment-service 的 CPU 达到 92%"


@pytest.mark.parametrize("case, changes, rule", [
    ("changed digit", dict(excerpt="cpu_usage=29%"), "evidence.excerpt_mismatch"),
    ("another run's invocation", dict(invocation_id=99), "evidence.invocation_ref"),
])
def test_a_bad_citation_is_rejected_from_stdin_with_exit_0(case, changes, rule):
    completed = run_cli("-", json.dumps(document(**changes)).encode())
    result = stdout_json(completed)
    assert result["verdict_ceiling"] == "REJECT" and result["route"] == "PRE_VERIFICATION_FALLBACK", case
    assert rule in result["gatekeeper_result"]["failed_rules"]
    assert result["verified_evidence"] == [] and result["verified_executor_output"]["claims"] == []


def test_output_equals_the_engines_result():
    doc = document(excerpt="cpu_usage=92% (5m")
    result = stdout_json(run_cli("-", json.dumps(doc).encode()))
    engine = check_executor_output(doc["run_id"], doc["executor_output"], [ToolInvocation.model_validate(r) for r in doc["invocations"]])
    assert result == {key: value for key, value in engine.model_dump(mode="json").items() if key in OUTPUT_KEYS}


@pytest.mark.parametrize("text, status", [
    ("我认为是数据库的问题。", "missing"),
    ('{"answer_version": "executor_evidence_v1", "claims": []}', "malformed"),
])
def test_unparsed_executor_text_gives_nulls_and_exit_0(text, status):
    doc = document()
    del doc["executor_output"]
    doc["executor_output_text"] = text
    result = stdout_json(run_cli("-", json.dumps(doc, ensure_ascii=False).encode()))
    assert result["parse_status"] == status and result["route"] == "PRE_VERIFICATION_FALLBACK"
    assert (result["verdict_ceiling"], result["gatekeeper_result"], result["verified_executor_output"]) == (None, None, None)
    assert result["verified_evidence"] == []


def test_executor_output_text_with_a_valid_contract_is_checked():
    doc = document()
    doc["executor_output_text"] = "```json\n" + json.dumps(doc.pop("executor_output"), ensure_ascii=False) + "\n```"
    result = stdout_json(run_cli("-", json.dumps(doc).encode()))
    assert (result["parse_status"], result["verdict_ceiling"]) == ("valid", "PASS")


def test_an_unreadable_invocation_row_is_ignored_with_a_note():
    doc = document()
    doc["invocations"][0]["invocation_id"] = "12"  # a string id is no invocation: nothing can cite it
    doc["invocations"].append(["not", "a", "row"])
    completed = run_cli("-", json.dumps(doc).encode())
    result = stdout_json(completed)
    assert result["verdict_ceiling"] == "REJECT"
    notes = completed.stderr.decode().splitlines()
    assert [line.split(":")[2].strip() for line in notes] == ["invocations[0] ignored", "invocations[2] ignored"]


def test_chinese_output_survives_an_ascii_terminal():
    completed = run_cli("-", json.dumps(document(), ensure_ascii=False).encode(), env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C"})
    assert "的 CPU 达到" in stdout_json(completed)["verified_executor_output"]["claims"][0]["claim_text"]


def _valid() -> dict:
    return document()


BAD_INPUTS = [
    ("not JSON", b"{claims: ["),
    ("empty file", b""),
    ("not UTF-8", b'{"run_id": "\xff"}'),
    ("NaN is not JSON", b'{"run_id": "r", "invocations": [], "executor_output": {"x": NaN}}'),
    ("duplicate keys read two ways", b'{"run_id": "r", "run_id": "s", "invocations": [], "executor_output": {}}'),
    ("top level is a list", b"[]"),
    ("run_id missing", json.dumps({k: v for k, v in _valid().items() if k != "run_id"}).encode()),
    ("run_id not a string", json.dumps({**_valid(), "run_id": 7}).encode()),
    ("invocations not a list", json.dumps({**_valid(), "invocations": {}}).encode()),
    ("no executor output", json.dumps({"run_id": "r", "invocations": []}).encode()),
    ("both executor outputs", json.dumps({**_valid(), "executor_output_text": "{}"}).encode()),
    ("executor_output not an object", json.dumps({**_valid(), "executor_output": [1]}).encode()),
    ("executor_output_text not a string", json.dumps({"run_id": "r", "invocations": [], "executor_output_text": 3}).encode()),
    ("nested too deeply", b'{"run_id": "r", "invocations": [], "executor_output": ' + b"[" * 100000 + b"]" * 100000 + b"}"),
]


@pytest.mark.parametrize("case, data", BAD_INPUTS, ids=[row[0] for row in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line_on_stderr(case, data):
    completed = run_cli("-", data)
    assert completed.returncode == 2, (case, completed.stdout[:200], completed.stderr[:300])
    assert completed.stdout == b""
    lines = completed.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attest gatekeeper-check: error: "), lines


@pytest.mark.parametrize("make_path", [lambda tmp: tmp / "missing.json", lambda tmp: tmp])
def test_unreadable_file_exits_2_with_one_line(tmp_path, make_path):
    completed = run_cli(str(make_path(tmp_path)))
    assert completed.returncode == 2 and completed.stdout == b""
    assert len(completed.stderr.decode().splitlines()) == 1 and "cannot read" in completed.stderr.decode()
