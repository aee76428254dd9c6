"""`attest verdict`: the deterministic verdict as a person runs it from a shell."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gateway.launcher import REPO_ROOT


def _run(payload, tmp_path, *, raw: str | None = None) -> subprocess.CompletedProcess:
    path = tmp_path / "input.json"
    path.write_text(raw if raw is not None else json.dumps(payload), encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "gateway.cli", "verdict", str(path)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)


def _payload(verification="direct_observation", model="PASS", ceiling="PASS", retries=0, claim_type="symptom"):
    return {
        "claims": [{"claim_id": "c1", "claim_type": claim_type}, {"claim_id": "c2", "claim_type": "context"}],
        "claim_checks": [{"claim_id": "c1", "verification": verification},
                         {"claim_id": "c2", "verification": "unsupported"}],
        "model_verdict": model, "verdict_ceiling": ceiling, "evidence_retry_count": retries,
    }


def test_direct_observation_passes_and_goes_to_composer(tmp_path):
    result = _run(_payload(), tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["effective_verdict"] == "PASS" and out["groundedness_score"] == 1.0
    assert out["critical_fact_count"] == 1 and out["next"] == "COMPOSER"
    assert [f["verification"] for f in out["facts_checked"] if f["is_critical"]] == ["direct_evidence"]


def test_ceiling_caps_the_model_verdict(tmp_path):
    out = json.loads(_run(_payload(ceiling="LOW_CONFID"), tmp_path).stdout)
    assert out["effective_verdict"] == "LOW_CONFID" and out["next"] == "COMPOSER"


def test_contradicted_critical_claim_rejects_with_zero_score(tmp_path):
    out = json.loads(_run(_payload(verification="contradicted"), tmp_path).stdout)
    assert out["effective_verdict"] == "REJECT" and out["groundedness_score"] == 0.0


@pytest.mark.parametrize("retries, expected", [(0, "EVIDENCE_RETRY"), (1, "COMPOSER")])
def test_critical_gap_gets_one_retry_only(tmp_path, retries, expected):
    out = json.loads(_run(_payload(verification="unsupported", model="LOW_CONFID", retries=retries), tmp_path).stdout)
    assert out["effective_verdict"] == "LOW_CONFID" and out["next"] == expected


@pytest.mark.parametrize("raw, fragment", [
    ("not json", "is not JSON"),
    ("[1, 2]", "must be a JSON object"),
    (json.dumps({**_payload(), "model_verdict": "MAYBE"}), "model_verdict"),
    (json.dumps({**_payload(), "evidence_retry_count": -1}), "evidence_retry_count"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, raw, fragment):
    result = _run(None, tmp_path, raw=raw)
    assert result.returncode == 2
    assert fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""
