"""`attest verdict FILE`: the deterministic effective verdict (DESIGN §3) for offline audits.

Input (FILE, or `-` for stdin):
    {"claims": [{"claim_id", "claim_type"}], "claim_checks": [{"claim_id", "verification"}],
     "model_verdict": str, "verdict_ceiling": str, "evidence_retry_count": int}
Output on stdout, one JSON object:
    {"effective_verdict", "groundedness_score", "critical_fact_count", "facts_checked", "next"}
where `next` is EVIDENCE_RETRY when the graph would run its one evidence-gap round, else COMPOSER.
Bad input: one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.core.contracts import ClaimType, Verdict, Verification
from shared.core.effective_verdict import compute_effective_verdict, should_retry_evidence

PROG = "attest verdict"


class _ClaimIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    claim_id: str = Field(min_length=1)
    claim_type: ClaimType
    claim_text: str = ""


class _CheckIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    claim_id: str = Field(min_length=1)
    verification: Verification
    detail: str = ""


class VerdictInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    claims: list[_ClaimIn]
    claim_checks: list[_CheckIn]
    model_verdict: Verdict
    verdict_ceiling: Verdict
    evidence_retry_count: int = Field(ge=0)


def decide(data: dict[str, Any]) -> dict[str, Any]:
    """The CLI's whole logic, importable for tests and audits."""
    request = VerdictInput.model_validate(data)
    claims = [claim.model_dump() for claim in request.claims]
    checks = [check.model_dump() for check in request.claim_checks]
    effective = compute_effective_verdict(claims, checks, request.model_verdict, request.verdict_ceiling)
    retry = should_retry_evidence(effective, request.verdict_ceiling, claims, checks, request.evidence_retry_count)
    return {
        "effective_verdict": effective.effective_verdict,
        "groundedness_score": effective.groundedness_score,
        "critical_fact_count": effective.critical_fact_count,
        "facts_checked": [fact.model_dump() for fact in effective.facts_checked],
        "next": "EVIDENCE_RETRY" if retry else "COMPOSER",
    }


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "input"
    more = f" (+{error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "The deterministic effective verdict of a claim-check file, offline."
    parser.add_argument("file", help="JSON input file, or - for stdin")


def run(args: argparse.Namespace) -> int:
    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        print(f"error: {args.file} is not JSON: {exc.msg} at line {exc.lineno}", file=sys.stderr)
        return 2
    if not isinstance(data, dict):
        print("error: the input must be a JSON object", file=sys.stderr)
        return 2
    try:
        result = decide(data)
    except ValidationError as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    print(json.dumps(result, ensure_ascii=False))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
