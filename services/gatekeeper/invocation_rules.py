"""Which invocation a binding cites, and whether it may be cited at all.

Rules `evidence.invocation_ref`, `evidence.invocation_state`, `evidence.polarity`, and the narrow
compatibility backfill of graph spec "Verifier input hook SHALL only perform narrow compatibility
backfill":

- a binding without `source_invocation_id` whose legacy `source_invocation_ids` holds exactly one
  id uses that id (no warning: it is the same reference in the old spelling);
- otherwise a missing id is backfilled only when exactly one current-run invocation has the
  binding's tool_name (restricted to the legacy ids when several were listed), with a warning;
  zero or several candidates are `evidence.invocation_ref` / low_confid. "Missing" is one case
  however it is spelled: no field, null, or an empty list, for either spelling (DESIGN §3 ruling
  "Compatibility backfill"); the schema rules do not fail it a second time;
- every id a binding names, singular or legacy, must be a current-run invocation: an absent id,
  another run's id, an abandoned invocation of this run (a lost executor attempt), or an
  id that appears on several rows is `evidence.invocation_ref` / reject.

Invocations passed in may include other runs' rows (callers may load by id); only rows whose
run_id equals the checked run are ever candidates or read for content. A caller that loads only
the current run's rows names, in `other_run_ids`, the cited ids it found in another run (see
`cited_invocation_ids`), so that such a citation is reported as belonging to another run and not
as absent: the forensics differ (a leak or a replay, not a typo), the severity does not. An
abandoned row is never a candidate either, whether passed in (flagged) or named in `abandoned_ids`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from services.gatekeeper.findings import NOTHING_QUOTED, Finding
from services.gatekeeper.rule_catalog import INVOCATION_REF, INVOCATION_STATE, POLARITY
from services.gatekeeper.schema_rules import BindingFields
from shared.core.contracts import EVIDENCE_TOOLS, ToolInvocation

# Claim types that may rest on a query that found nothing.
MAY_CITE_NO_EVIDENCE: frozenset[str] = frozenset({"negative_observation", "context"})


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def cited_invocation_ids(bindings: Iterable[Any]) -> set[int]:
    """Every integer id the (raw) bindings name, singular or legacy; anything else is ignored (the
    schema rules report it)."""
    ids: set[int] = set()
    for binding in bindings:
        if not isinstance(binding, dict):
            continue
        single = binding.get("source_invocation_id")
        if _is_int(single):
            ids.add(single)
        plural = binding.get("source_invocation_ids")
        if isinstance(plural, list):
            ids.update(value for value in plural[:100] if _is_int(value))
    return ids


class InvocationIndex:
    def __init__(
        self, run_id: str, invocations: list[ToolInvocation], other_run_ids: Collection[int] = (),
        abandoned_ids: Collection[int] = (),
    ) -> None:
        self.run_id = run_id
        self._other_run_ids = frozenset(other_run_ids)
        self._abandoned_ids = set(abandoned_ids)
        self._by_id: dict[int, list[ToolInvocation]] = {}
        for invocation in invocations:
            if invocation.abandoned:
                self._abandoned_ids.add(invocation.invocation_id)
            else:
                self._by_id.setdefault(invocation.invocation_id, []).append(invocation)
        self._current_by_tool: dict[str, list[ToolInvocation]] = {}
        for rows in self._by_id.values():
            if len(rows) == 1 and rows[0].run_id == run_id:
                self._current_by_tool.setdefault(rows[0].tool_name, []).append(rows[0])

    def lookup(self, invocation_id: int) -> tuple[ToolInvocation | None, str]:
        """(the current-run row, "") or (None, why it cannot be cited)."""
        rows = self._by_id.get(invocation_id, [])
        if not rows:
            if invocation_id in self._abandoned_ids:
                return None, (f"invocation {invocation_id} belongs to an abandoned attempt of run {self.run_id!r} "
                              "(its executor replica was lost): it is not citable")
            if invocation_id in self._other_run_ids:
                return None, f"invocation {invocation_id} belongs to another run"
            return None, f"invocation {invocation_id} does not exist in run {self.run_id!r}"
        if len(rows) > 1:
            return None, f"invocation id {invocation_id} appears on {len(rows)} rows"
        if rows[0].run_id != self.run_id:
            return None, f"invocation {invocation_id} belongs to another run"
        return rows[0], ""

    def current_of_tool(self, tool_name: str) -> list[ToolInvocation]:
        return list(self._current_by_tool.get(tool_name, []))


@dataclass
class Resolution:
    invocation: ToolInvocation | None = None  # set only when the cited row may be read
    invocation_id: int | None = None
    backfilled: bool = False
    warning: str = ""
    findings: list[Finding] = field(default_factory=list)


def _reject(detail: str, field: str = "", quoted: Any = NOTHING_QUOTED) -> Finding:
    return Finding(INVOCATION_REF, "reject", detail, field, quoted)


def resolve_invocation(fields: BindingFields, index: InvocationIndex) -> Resolution:
    result = Resolution()
    legacy_rows: list[ToolInvocation] = []
    for legacy_id in fields.source_invocation_ids:
        row, why = index.lookup(legacy_id)
        if row is None:
            result.findings.append(_reject(why, "source_invocation_ids"))
        else:
            legacy_rows.append(row)

    target = fields.source_invocation_id
    if target is None and len(fields.source_invocation_ids) == 1:
        target = fields.source_invocation_ids[0]
    if target is None:
        if not fields.tool_name:
            result.findings.append(
                Finding(INVOCATION_REF, "low_confid", "no source_invocation_id and no tool_name to find one")
            )
            return result
        if fields.source_invocation_ids:
            pool = [row for row in legacy_rows if row.tool_name == fields.tool_name]
        else:
            pool = index.current_of_tool(fields.tool_name)
        if len(pool) != 1:
            # A catalogue tool name is ours to name; any other string is the executor's.
            tool = fields.tool_name if fields.tool_name in EVIDENCE_TOOLS else "tool_name"
            result.findings.append(
                Finding(
                    INVOCATION_REF,
                    "low_confid",
                    f"no source_invocation_id and {len(pool)} current-run {tool} invocations to choose from",
                    "" if tool == fields.tool_name else "tool_name",
                    NOTHING_QUOTED if tool == fields.tool_name else fields.tool_name,
                )
            )
            return result
        target = pool[0].invocation_id
        result.backfilled = True
        # The stored row's tool name: equal to the binding's, and ours.
        result.warning = (
            f"source_invocation_id backfilled with {target}: the only current-run "
            f"{pool[0].tool_name} invocation"
        )

    result.invocation_id = target
    row, why = index.lookup(target)
    if row is None:
        result.findings.append(_reject(why))
        return result
    if fields.tool_name and row.tool_name != fields.tool_name:
        result.findings.append(
            _reject(f"differs from invocation {target}'s tool_name {row.tool_name!r}", "tool_name", fields.tool_name)
        )
        return result
    result.invocation = row
    return result


def invocation_state_findings(invocation: ToolInvocation) -> list[Finding]:
    findings: list[Finding] = []
    if invocation.lifecycle != "READY":
        findings.append(
            Finding(INVOCATION_STATE, "reject", f"invocation {invocation.invocation_id} is {invocation.lifecycle}")
        )
    if invocation.evidence_status == "ERROR":
        findings.append(
            Finding(INVOCATION_STATE, "reject", f"invocation {invocation.invocation_id} ended in ERROR")
        )
    return findings


def polarity_findings(claim_type: str | None, invocation: ToolInvocation) -> list[Finding]:
    if claim_type is None or claim_type in MAY_CITE_NO_EVIDENCE:
        return []
    if invocation.evidence_status == "NO_EVIDENCE":
        return [
            Finding(
                POLARITY,
                "reject",
                f"a {claim_type} claim cites invocation {invocation.invocation_id}, which found no evidence",
            )
        ]
    return []
