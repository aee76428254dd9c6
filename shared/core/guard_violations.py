"""EvidenceGuard's violation codes: stable strings that callers, audits and tests match on.

A code names what is wrong, never the content of a record: `detail` texts carry ids, statuses
and field names only, so a rejected reference exposes nothing of another run's (or a failed
call's) data. Codes are grouped by what they are about:

- `draft.*`, `guard.*`   the Draft as a whole, or the guard itself (always fail closed)
- `analysis.*`, `report.*`  structure of a concluded Draft (spec: "Deterministic Draft and
                            evidence validation"); not checked when `conclusion=null`, except
                            `analysis.kind_unsupported`, which excludes that analysis' references
- `tool_ref.*`           resolving `run_id + tool_call_id` to a current-run canonical invocation
                         (spec: "Current Run canonical invocation ownership")
- `projection.*`         strict parsing of that invocation's `agent_result` (spec: "Verified
                         evidence snapshot is minimal and deterministic", projection mismatch)
- `kind.*`               the Analysis kind against the evidence status (spec: "Analysis kind
                         matches evidence semantics")
- `statement.*`          a typed statement's refs: a tool call its item may rest on, and a
                         raw_path that call's result has
"""

from __future__ import annotations

# Draft and guard
DRAFT_INVALID = "draft.invalid"
DRAFT_TOO_LARGE = "draft.too_large"
GUARD_INTERNAL_ERROR = "guard.internal_error"
# Concluded-Draft structure
ANALYSIS_ID_BLANK = "analysis.id_blank"
ANALYSIS_ID_DUPLICATE = "analysis.id_duplicate"
ANALYSIS_KIND_UNSUPPORTED = "analysis.kind_unsupported"
ANALYSIS_TEXT_BLANK = "analysis.text_blank"
ANALYSIS_TOOL_CALLS_MISSING = "analysis.tool_calls_missing"
REPORT_TEXT_BLANK = "report.text_blank"
REPORT_REFS_MISSING = "report.refs_missing"
REPORT_REF_UNKNOWN = "report.ref_unknown"
# Tool references
TOOL_REF_BLANK = "tool_ref.blank"
TOOL_REF_NOT_FOUND = "tool_ref.not_found"
TOOL_REF_OTHER_RUN = "tool_ref.other_run"
TOOL_REF_AMBIGUOUS = "tool_ref.ambiguous"
TOOL_REF_NOT_READY = "tool_ref.not_ready"
TOOL_REF_EVIDENCE_STATUS = "tool_ref.evidence_status"
TOOL_REF_AGENT_RESULT_MISSING = "tool_ref.agent_result_missing"
# Projections
PROJECTION_UNKNOWN_TOOL = "projection.unknown_tool"
PROJECTION_INVALID_JSON = "projection.invalid_json"
PROJECTION_TOOL_MISMATCH = "projection.tool_mismatch"
PROJECTION_TOOL_CALL_ID_MISMATCH = "projection.tool_call_id_mismatch"
PROJECTION_STATUS_MISMATCH = "projection.status_mismatch"
PROJECTION_CONTRACT = "projection.contract"
PROJECTION_SCOPE_MISSING = "projection.scope_missing"
# Kind semantics
KIND_NORMAL_WITHOUT_EVIDENCE = "kind.normal_without_evidence"
KIND_NEGATIVE_WITH_EVIDENCE = "kind.negative_with_evidence"

# Typed statements' refs (docs/statements.md)
STATEMENT_REF_UNCITED = "statement.ref_uncited"
STATEMENT_REF_NOT_FOUND = "statement.ref_not_found"

VIOLATION_CODES: dict[str, str] = {
    DRAFT_INVALID: "the input is not a readable Draft",
    DRAFT_TOO_LARGE: "the Draft exceeds a size bound (analyses, references, items or text length)",
    GUARD_INTERNAL_ERROR: "the guard could not check the Draft; it fails closed",
    ANALYSIS_ID_BLANK: "a concluded Draft's Analysis has a blank analysis_id",
    ANALYSIS_ID_DUPLICATE: "a concluded Draft has two Analyses with the same analysis_id",
    ANALYSIS_KIND_UNSUPPORTED: "an Analysis kind is neither NORMAL nor NEGATIVE_OBSERVATION",
    ANALYSIS_TEXT_BLANK: "a concluded Draft's Analysis has blank text",
    ANALYSIS_TOOL_CALLS_MISSING: "a concluded Draft's Analysis cites no tool call",
    REPORT_TEXT_BLANK: "the Conclusion, an Action Plan item or a Recommendation has blank text",
    REPORT_REFS_MISSING: "the Conclusion, an Action Plan item or a Recommendation references no Analysis",
    REPORT_REF_UNKNOWN: "the Conclusion, an Action Plan item or a Recommendation references an unknown Analysis",
    TOOL_REF_BLANK: "a blank tool_call_id",
    TOOL_REF_NOT_FOUND: "no invocation of the current run has this tool_call_id",
    TOOL_REF_OTHER_RUN: "the tool_call_id belongs only to another run's invocation",
    TOOL_REF_AMBIGUOUS: "several current-run invocations share this tool_call_id",
    TOOL_REF_NOT_READY: "the invocation is PROJECTING or ERROR, not READY",
    TOOL_REF_EVIDENCE_STATUS: "the invocation's evidence_status is neither EVIDENCE_FOUND nor NO_EVIDENCE",
    TOOL_REF_AGENT_RESULT_MISSING: "the invocation has no agent_result",
    PROJECTION_UNKNOWN_TOOL: "the invocation's tool is not an evidence tool with a supported projection",
    PROJECTION_INVALID_JSON: "agent_result is not a JSON object",
    PROJECTION_TOOL_MISMATCH: "the projection names another tool than the canonical record",
    PROJECTION_TOOL_CALL_ID_MISMATCH: "the projection carries another tool_call_id than the canonical record",
    PROJECTION_STATUS_MISMATCH: "the projection's content contradicts the record's evidence_status",
    PROJECTION_CONTRACT: "the projection or its evidence refs break the tool's projection contract",
    PROJECTION_SCOPE_MISSING: "the invocation has no bounded request scope",
    KIND_NORMAL_WITHOUT_EVIDENCE: "a NORMAL Analysis cites a call that found no evidence",
    STATEMENT_REF_UNCITED: "a typed statement cites a tool call its item's Analyses do not cite",
    STATEMENT_REF_NOT_FOUND: "a typed statement cites a raw_path its tool call's result does not have",
    KIND_NEGATIVE_WITH_EVIDENCE: "a NEGATIVE_OBSERVATION Analysis cites a call that found evidence",
}
