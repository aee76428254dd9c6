"""The executor checks its own citations before its output leaves it.

An executor that cites a ref with an excerpt the gatekeeper refuses gets its whole answer replaced
by a fallback, and a retry fails the same way. So each binding of an executor_evidence_v2 output
is judged here as the gatekeeper will judge its citation, with the same matcher
(`shared/core/excerpt_match.py`):

- its invocation (`source_invocation_id`, and every id of `source_invocation_ids`) is one
  invocation of this run, READY and not ERROR, and of the binding's `tool_name`;
- its `raw_path` is one of that invocation's evidence refs;
- its `evidence_excerpt` occurs in that ref's text.

A binding whose excerpt is missing or not found is **repaired**: the excerpt becomes a verbatim,
matcher-approved piece of the same ref (its most telling line, `excerpt_choice.py`). A binding
that fails any other of these checks, or whose ref has no citable piece, is **dropped** (the
gatekeeper would reject it: the whole answer would be lost to a fallback); a claim left without
bindings is dropped. The claim's text is never touched — whether it follows from the (repaired)
citation is the verifier's question.

Left to the gatekeeper, untouched: a binding that names an invocation outside this run (absent,
or another run's). No honest executor writes one — ours cite only the invocations they made, a
model sees only this run's — so it is a leak, a replay or a fabrication, and the gatekeeper
rejects it with its forensics (`evidence.invocation_ref`, "belongs to another run"; REJECT never
retries): removing it here would hide that from the run's audit. It is counted in the report.
Also left alone: what the gatekeeper marks as low confidence rather than rejecting — a binding
without raw_path or citing an invocation without evidence refs (graph spec: "Missing raw path is
low confidence"; a raw_path is never backfilled, here neither), a binding without an id that the
gatekeeper's narrow backfill cannot resolve (one it can resolve is judged against that
invocation, its ids left as written), an excerpt too short — and the schema questions: an output
that does not parse as the contract, a claim or binding that is not an object, ids that are not
integers, a claim that had no bindings to begin with, claim-type rules (polarity). Those are
signals about the quality of a model's citations that the verdict ceiling is meant to carry.

What was repaired or dropped is returned as a `SelfCheckReport` (logged at INFO by `log_report`);
the output is re-serialised only when something changed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from services.executor.excerpt_choice import is_supported, telling_excerpt
from shared.core.contracts import EvidenceRef, ExecutorEvidenceV2, ToolInvocation
from shared.core.evidence_view import evidence_view
from shared.core.tool_results import LogsResult, hit_prefix, parse_path, read_result
from shared.executor_contract import ParsedExecutorOutput, parse_executor_output

log = logging.getLogger(__name__)
MAX_REPORTED = 20  # entries kept per list; the counts are always exact


@dataclass
class SelfCheckReport:
    repaired: int = 0
    dropped_bindings: int = 0
    dropped_claims: int = 0
    outside_run: int = 0  # bindings naming an invocation outside this run, left to the gatekeeper
    details: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.repaired or self.dropped_bindings or self.dropped_claims)

    def note(self, detail: str) -> None:
        if len(self.details) < MAX_REPORTED:
            self.details.append(detail)

    def summary(self) -> str:
        """One line for the audit, e.g. `citation self-check: 1 excerpt(s) repaired, 2 binding(s)
        dropped, 1 claim(s) dropped`; empty when there is nothing to say."""
        parts = []
        if self.changed:
            parts += [
                f"{self.repaired} excerpt(s) repaired",
                f"{self.dropped_bindings} binding(s) dropped",
                f"{self.dropped_claims} claim(s) dropped",
            ]
        if self.outside_run:
            parts.append(f"{self.outside_run} binding(s) citing an invocation outside this run left to the gatekeeper")
        return "citation self-check: " + ", ".join(parts) if parts else ""


@dataclass
class CheckedText:
    text: str
    report: SelfCheckReport
    # `parse_executor_output(text)`, when the check read the text it returns (unchanged): the
    # caller need not parse it again.
    parsed: ParsedExecutorOutput | None = None


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class _Citable:
    """The run's invocations that a binding may cite, by id (an id on several rows is none) and
    by tool (for the gatekeeper's narrow backfill of a missing id)."""

    def __init__(self, invocations: Iterable[ToolInvocation], run_id: str | None) -> None:
        rows: dict[int, list[ToolInvocation]] = {}
        for invocation in invocations:
            if run_id is None or invocation.run_id == run_id:
                rows.setdefault(invocation.invocation_id, []).append(invocation)
        self._by_id = {key: found[0] for key, found in rows.items() if len(found) == 1}

    def get(self, invocation_id: int) -> ToolInvocation | None:
        return self._by_id.get(invocation_id)

    def of_tool(self, tool_name: str) -> list[ToolInvocation]:
        return [invocation for invocation in self._by_id.values() if invocation.tool_name == tool_name]


def _refs_at(invocation: ToolInvocation, raw_path: str) -> list[EvidenceRef]:
    return evidence_view(invocation).at(raw_path)


def _message_start(invocation: ToolInvocation, ref: EvidenceRef) -> int:
    """Where a log hit's message begins in its text (after the renderer's `hit_prefix`), so that
    a repaired excerpt quotes the message; 0 for other refs."""
    result = read_result(invocation.tool_name, invocation.agent_result)
    path = parse_path(ref.raw_path.strip())
    if not isinstance(result, LogsResult) or path is None or path[0] != "hits" or path[3] or path[1] >= len(result.hits):
        return 0
    return len(hit_prefix(result, result.hits[path[1]]))


def _cited_ids(binding: dict[str, Any]) -> tuple[int | None, list[int]]:
    """The ids as the gatekeeper reads them: a value of the wrong type counts as absent (its
    schema rule reports it)."""
    single = binding.get("source_invocation_id")
    plural = binding.get("source_invocation_ids")
    ids = [v for v in plural if _is_int(v)] if isinstance(plural, list) and len(plural) <= 100 else []
    valid_plural = isinstance(plural, list) and len(ids) == len(plural)
    return (single if _is_int(single) else None), (ids if valid_plural else [])


def _problem(binding: dict[str, Any], citable: _Citable) -> tuple[str, list[EvidenceRef], ToolInvocation | None]:
    """("", refs, invocation) for a binding whose citation can be judged and may stand (perhaps
    after an excerpt repair); ("skip", …) for one the gatekeeper marks low confidence or decides
    by its schema rules, ("outside", …) for an invocation outside this run — both left to the
    gatekeeper; else why the binding is dropped. Resolution follows the gatekeeper's
    (`invocation_rules.resolve_invocation`), backfill included; nothing is written back."""
    single, plural = _cited_ids(binding)
    tool_name = binding.get("tool_name")
    tool_name = tool_name.strip() if isinstance(tool_name, str) else ""
    if any(citable.get(cited) is None for cited in plural):
        return "outside", [], None
    target = single if single is not None else (plural[0] if len(plural) == 1 else None)
    if target is None:
        if not tool_name:
            return "skip", [], None
        pool = ([inv for inv in (citable.get(i) for i in plural) if inv is not None and inv.tool_name == tool_name]
                if plural else citable.of_tool(tool_name))
        if len(pool) != 1:
            return "skip", [], None  # no single candidate: low confidence by the gatekeeper's rule
        target = pool[0].invocation_id
    invocation = citable.get(target)
    if invocation is None:
        return "outside", [], None
    if tool_name and tool_name != invocation.tool_name:
        return f"tool_name {tool_name[:60]!r} is not invocation {target}'s {invocation.tool_name!r}", [], None
    if invocation.lifecycle != "READY" or invocation.evidence_status == "ERROR":
        return f"invocation {target} is not a ready result ({invocation.lifecycle}/{invocation.evidence_status})", [], None
    raw_path = binding.get("raw_path")
    if not isinstance(raw_path, str) or not raw_path.strip():
        return "skip", [], None  # missing: low confidence, never backfilled; not text: a schema question
    if not evidence_view(invocation).count():
        return "skip", [], None  # an invocation without refs: low confidence by the gatekeeper's rule
    refs = _refs_at(invocation, raw_path.strip())
    if not refs:
        return f"raw_path {raw_path.strip()[:80]!r} is not among invocation {target}'s evidence refs", [], None
    return "", refs, invocation


def check_raw_output(raw: dict[str, Any], invocations: Iterable[ToolInvocation],
                     run_id: str | None = None) -> SelfCheckReport:
    """Repair or drop, in place, the bindings of a decoded executor_evidence_v2 object (see the
    module docstring). `invocations` are this run's (rows of other runs are ignored when `run_id`
    is given)."""
    citable = _Citable(invocations, run_id)
    report = SelfCheckReport()
    claims = raw.get("claims")
    if not isinstance(claims, list):
        return report
    kept_claims: list[Any] = []
    for claim_index, claim in enumerate(claims):
        bindings = claim.get("evidence_bindings") if isinstance(claim, dict) else None
        if not isinstance(bindings, list) or not bindings:
            kept_claims.append(claim)
            continue
        claim_id = str(claim.get("claim_id", ""))[:60]
        kept: list[Any] = []
        for binding_index, binding in enumerate(bindings):
            where = f"claims[{claim_index}].evidence_bindings[{binding_index}] ({claim_id})"
            if not isinstance(binding, dict):
                kept.append(binding)
                continue
            why, refs, invocation = _problem(binding, citable)
            if why in ("skip", "outside"):
                if why == "outside":
                    report.outside_run += 1
                    report.note(f"{where}: cites an invocation outside this run; left to the gatekeeper")
                kept.append(binding)
                continue
            if why:
                report.dropped_bindings += 1
                report.note(f"{where}: dropped: {why}")
                continue
            excerpt = binding.get("evidence_excerpt")
            if isinstance(excerpt, str) and any(is_supported(excerpt, ref.text) for ref in refs):
                kept.append(binding)
                continue
            assert invocation is not None
            repaired = next(
                (piece for ref in refs if (piece := telling_excerpt(ref.text, _message_start(invocation, ref)))),
                None,
            )
            if repaired is None:
                report.dropped_bindings += 1
                report.note(f"{where}: dropped: no citable excerpt in the ref")
                continue
            binding["evidence_excerpt"] = repaired
            report.repaired += 1
            report.note(f"{where}: excerpt not found in the ref, replaced by {repaired[:60]!r}")
            kept.append(binding)
        if kept:
            claim["evidence_bindings"] = kept
            kept_claims.append(claim)
        else:
            report.dropped_claims += 1
            report.note(f"claims[{claim_index}] ({claim_id}): dropped: no binding left")
    raw["claims"] = kept_claims
    return report


def check_output_text(text: str, invocations: Iterable[ToolInvocation], run_id: str | None = None) -> CheckedText:
    """The model path: the executor's final text with its bindings checked. Text that is not a
    valid executor_evidence_v2 output is returned untouched (the parse status reports it); the
    text is re-serialised only when something changed."""
    parsed = parse_executor_output(text)
    if parsed.parse_status != "valid" or parsed.raw is None:
        return CheckedText(text, SelfCheckReport(), parsed)
    # The decoded object is this call's own (nothing else holds it): checked in place. Unchanged,
    # it is still the text's parse.
    report = check_raw_output(parsed.raw, invocations, run_id)
    if not report.changed:
        return CheckedText(text, report, parsed)
    return CheckedText(json.dumps(parsed.raw, ensure_ascii=False), report)


def check_output(output: ExecutorEvidenceV2, invocations: Iterable[ToolInvocation],
                 run_id: str | None = None) -> tuple[ExecutorEvidenceV2, SelfCheckReport]:
    """The embedded path: a typed output with its bindings checked (the same rules)."""
    raw = output.model_dump(mode="json")
    report = check_raw_output(raw, invocations, run_id)
    if not report.changed:
        return output, report
    return ExecutorEvidenceV2.model_validate(raw), report


def log_report(report: SelfCheckReport, run_id: str = "") -> None:
    if report.changed or report.outside_run:
        log.info("%s (run %s): %s", report.summary(), run_id or "-", "; ".join(report.details))
