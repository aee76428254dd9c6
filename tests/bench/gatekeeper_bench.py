"""Gatekeeper benchmark: the time to check 1,000 evidence bindings
over ~5 MB and over ~50 MB of evidence refs, and the ratio of the two.

The run has a fixed number of invocations whose ref lists grow with the evidence size (200 refs
each at 5 MB, 2,000 at 50 MB), so any per-binding scan of an invocation's refs would show up as
growth. Every binding is genuine (its excerpt is a word-aligned slice of the cited ref's text),
so every one goes through every rule and into the verified projection; the run checks that the
ceiling is PASS with 1,000 passed bindings before timing it.

Two figures per size:
- `engine`: `check_executor_output` on invocations already in memory (what the gRPC servicer
  does after reading the run's rows);
- `end_to_end`: the `attest gatekeeper-check` path on the JSON document: parse, strict
  validation of every invocation row, check (`check_cli.check_document`).

A ratio of 10 for 10x the evidence is linear growth; below 10 means the fixed per-binding work
still dominates. Run: `make bench`, or `python -m tests.bench.gatekeeper_bench [--quick]`.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

from services.gatekeeper.check_cli import check_document
from services.gatekeeper.engine import check_executor_output
from shared.core.contracts import ToolInvocation
from shared.core.tool_results import (
    LogHit,
    LogsResult,
    dump_result,
    forget_parsed_results,
    read_result,
    ref_count,
    ref_text,
    rendered_refs,
)
from tests.bench.bench_report import median_seconds, write_result

RUN_ID = "bench-run"
BINDINGS = 1000
CLAIMS = 100  # x 10 bindings each: within the catalog's max_claims and max_bindings_per_claim
INVOCATIONS = 50
REF_TEXT_CHARS = 480  # the executor bounds one ref's text at 500 characters
MESSAGE_CHARS = 440  # a hit's message, so that its rendered ref (with the line's prefix) stays within 500
WORDS = (
    "upstream timeout connection pool exhausted retry budget db-primary payment-service checkout-api "
    "latency p99 error rate 5xx gateway deploy rollback config memory OOMKilled disk queue lag "
    "certificate expiry 连接池 耗尽 超时 重试 内存 磁盘 告警 发布 回滚"
).split()
SERVICES = ("payment-service", "checkout-api", "order-service", "inventory", "gateway")


def _ref_text(rng: random.Random, index: int) -> str:
    minute, second = divmod(index % 3600, 60)
    head = (
        f"2026-11-29T10:{minute:02d}:{second:02d}Z ERROR {rng.choice(SERVICES)} host=node-{rng.randrange(64)} "
        f"request r{index:08d} latency={rng.randrange(1, 9999)}ms"
    )
    words = [head]
    length = len(head)
    while length < REF_TEXT_CHARS:
        word = rng.choice(WORDS) if rng.random() < 0.85 else str(rng.randrange(10**6))
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:REF_TEXT_CHARS].rstrip()


def _excerpt(rng: random.Random, text: str) -> str:
    """A slice of whole words (never cutting a number), 3 to 8 words long."""
    words = text.split(" ")
    start = rng.randrange(0, max(1, len(words) - 8))
    return " ".join(words[start : start + rng.randrange(3, 9)])


def build_case(target_bytes: int, seed: int = 7) -> dict[str, Any]:
    """The JSON input document of the CLI: a run of query_logs calls whose stored results hold
    ~target_bytes of log text. As the executor stores them, each call keeps its typed result once
    and its evidence refs as a view of it (`refs_rendered`): no ref list is in the document."""
    rng = random.Random(seed)
    sample = random.Random(seed + 1)
    bytes_per_hit = sum(len(_ref_text(sample, i).encode("utf-8")) for i in range(200)) / 200
    per_invocation = max(1, round(target_bytes / (bytes_per_hit * INVOCATIONS)))
    invocations = []
    results: list[LogsResult] = []
    index = 0
    for number in range(INVOCATIONS):
        hits = []
        for _ in range(per_invocation):
            hits.append(LogHit(ts=f"2026-11-29T10:{(index // 60) % 60:02d}:{index % 60:02d}Z", level="ERROR",
                               service=rng.choice(SERVICES), host=f"node-{rng.randrange(64)}",
                               message=_ref_text(rng, index)[:MESSAGE_CHARS]))
            index += 1
        result = LogsResult(tool="query_logs", service="payment-service", start="2026-11-29T10:00:00Z",
                            end="2026-11-29T11:00:00Z", total_matches=len(hits), returned=len(hits), hits=hits,
                            summary=f"query_logs service=payment-service: {len(hits)} lines")
        results.append(result)
        invocations.append({
            "invocation_id": number + 1,
            "run_id": RUN_ID,
            "tool_call_id": f"call-{number + 1}",
            "tool_name": "query_logs",
            "lifecycle": "READY",
            "evidence_status": "EVIDENCE_FOUND",
            "request": {"tool": "query_logs", "service": "payment-service"},
            "agent_result": dump_result(result),
            "retrieval_details": {"source": "bench", "refs_rendered": True, "ref_count": ref_count(result)},
        })
    claims = []
    for claim_number in range(CLAIMS):
        bindings = []
        for _ in range(BINDINGS // CLAIMS):
            number = rng.randrange(INVOCATIONS)
            path = f"hits[{rng.randrange(per_invocation)}]"
            bindings.append({
                "source_type": "logs",
                "tool_name": "query_logs",
                "source_invocation_id": number + 1,
                "raw_path": path,
                "evidence_excerpt": _excerpt(rng, ref_text(results[number], path) or ""),
            })
        claims.append({
            "claim_id": f"c{claim_number}",
            "claim_type": "observation",
            "claim_text": f"observation {claim_number}",
            "support_level": "direct",
            "evidence_bindings": bindings,
        })
    return {
        "run_id": RUN_ID,
        "invocations": invocations,
        "executor_output": {"answer_version": "executor_evidence_v2", "claims": claims,
                            "hypotheses": [], "recommended_actions": [], "missing_info": []},
    }


def _evidence_bytes(case: dict[str, Any]) -> int:
    """The bytes of evidence text the run's refs address (every hit's rendered text)."""
    total = 0
    for invocation in case["invocations"]:
        result = read_result(invocation["tool_name"], invocation["agent_result"])
        total += sum(len(ref.text.encode("utf-8")) for ref in rendered_refs(result)) if result is not None else 0
    return total


def measure(target_mb: float, repeats: int) -> dict[str, Any]:
    case = build_case(int(target_mb * 1_000_000))
    invocations = [ToolInvocation.model_validate(row) for row in case["invocations"]]
    output = case["executor_output"]
    check = check_executor_output(RUN_ID, output, invocations)
    passed = sum(1 for item in check.gatekeeper_result.checked_bindings if item.outcome == "passed")
    if check.verdict_ceiling != "PASS" or passed != BINDINGS:
        raise SystemExit(f"benchmark case is not all-valid: ceiling {check.verdict_ceiling}, {passed} passed")
    document = json.dumps(case, ensure_ascii=False)
    def engine_run() -> None:
        forget_parsed_results()  # each run reads the stored results afresh, as a new check does
        for invocation in invocations:
            invocation._view = None
        check_executor_output(RUN_ID, output, invocations)

    def end_to_end_run() -> None:
        forget_parsed_results()
        check_document(document)

    engine, engine_samples = median_seconds(engine_run, repeats)
    end_to_end, e2e_samples = median_seconds(end_to_end_run, max(1, repeats // 2))
    evidence_bytes = _evidence_bytes(case)
    return {
        "target_mb": target_mb,
        "evidence_bytes": evidence_bytes,
        "evidence_refs": sum(i["retrieval_details"]["ref_count"] for i in case["invocations"]),
        "input_document_bytes": len(document.encode("utf-8")),
        "bindings": BINDINGS,
        "engine_seconds": engine,
        "engine_samples": engine_samples,
        "end_to_end_seconds": end_to_end,
        "end_to_end_samples": e2e_samples,
        "end_to_end_seconds_per_mb": end_to_end / (evidence_bytes / 1_000_000),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.gatekeeper_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="0.5 MB and 5 MB, fewer repeats (a smoke run)")
    args = parser.parse_args(argv)
    sizes = (0.5, 5) if args.quick else (5, 50)
    repeats = 3 if args.quick else 5
    rows = [measure(size, repeats) for size in sizes]
    small, large = rows
    ratios = {
        "evidence_bytes": large["evidence_bytes"] / small["evidence_bytes"],
        "engine": large["engine_seconds"] / small["engine_seconds"],
        "end_to_end": large["end_to_end_seconds"] / small["end_to_end_seconds"],
    }
    print(f"gatekeeper: {BINDINGS:,} bindings, {INVOCATIONS} invocations, evidence growing {ratios['evidence_bytes']:.1f}x")
    print(f"{'evidence':>10} {'refs':>9} {'engine ms':>10} {'end-to-end ms':>14} {'e2e ms/MB':>10}")
    for row in rows:
        print(
            f"{row['evidence_bytes'] / 1e6:>8.1f}MB {row['evidence_refs']:>9,} {row['engine_seconds'] * 1e3:>10.1f} "
            f"{row['end_to_end_seconds'] * 1e3:>14.1f} {row['end_to_end_seconds_per_mb'] * 1e3:>10.1f}"
        )
    print(
        f"ratio large/small: engine {ratios['engine']:.2f}x, end-to-end {ratios['end_to_end']:.2f}x "
        f"(evidence {ratios['evidence_bytes']:.1f}x; equal to it = linear, below = sub-linear)"
    )
    path = write_result("gatekeeper", {"sizes": rows, "ratios": ratios, "quick": args.quick})
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
