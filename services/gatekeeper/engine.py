"""The gatekeeper engine: one executor output, checked against the current run's invocations.

Graph spec, "Executor Gatekeeper SHALL validate deterministic structured-output
failures", "Gatekeeper SHALL validate evidence reference fidelity", "Gatekeeper severity SHALL
constrain effective verdict", "Gatekeeper SHALL expose rule catalog metadata in audit output".

Aggregation:
- `severity` is the worst failed severity; `verdict_ceiling` is PASS / LOW_CONFID / REJECT for
  none / low_confid / reject.
- `status` is fail when any rule failed, warn when there are only warnings (backfill, dropped
  hypothesis items, unknown fields ignored), else pass.
- `route` is PRE_VERIFICATION_FALLBACK when the parse status is not valid, when the ceiling is
  REJECT, or when no claim keeps a passed binding (there is nothing verified to verify — this
  includes an output with no claims at all); else VERIFIER.

A binding is checked by every rule that can be evaluated (a schema problem does not stop the
invocation, path and excerpt checks), so the worst problem always decides. Its CheckedBinding
reports that worst rule; every failure is listed in `errors`. Outcome `backfilled` means the
binding passed every rule after its invocation id was backfilled; it is projected like `passed`.

Every error, warning and checked binding names its place by position (`claims[3]`,
`claims[3].evidence_bindings[0].raw_path`), in our words; the executor's value there is kept,
escaped and bounded, in `executor_values` for the persisted audit (`quoted_values.py`), which a
verifier never receives (`GatekeeperResult.for_verifier`).

The engine never raises on any input: anything unexpected becomes a fail result with severity
reject, so a defect can only make the gatekeeper stricter.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Literal

from pydantic import BaseModel, Field

from services.gatekeeper.excerpt_rules import ExcerptChecker
from services.gatekeeper.findings import NOTHING_QUOTED, SEVERITY_RANK, Finding, worst
from services.gatekeeper.invocation_rules import (
    InvocationIndex,
    cited_invocation_ids,
    invocation_state_findings,
    polarity_findings,
    resolve_invocation,
)
from services.gatekeeper.projection import PassedBinding, project
from services.gatekeeper.quoted_values import QuotedValues
from services.gatekeeper.raw_path_rules import RefIndex
from services.gatekeeper.rule_catalog import (
    EXCERPT_MISMATCH,
    SCHEMA_EXECUTOR_V2,
    CheckParameters,
    RuleCatalog,
    shared_default_catalog,
)
from services.gatekeeper.schema_rules import (
    ClaimShape,
    check_binding_shape,
    check_claim_shape,
    missing_list_findings,
    read_side_lists,
    removed_field_findings,
)
from shared.core.contracts import (
    CheckedBinding,
    ExecutorEvidenceV2,
    GatekeeperOutcome,
    GatekeeperResult,
    ParseStatus,
    Severity,
    ToolInvocation,
    Verdict,
    VerifiedEvidence,
)
from shared.executor_contract import check_contract_object, parse_executor_output, unknown_fields
from shared.failed_calls import failed_calls

Route = Literal["VERIFIER", "PRE_VERIFICATION_FALLBACK"]
# Given cited ids that are not among the invocations passed in: those that exist in another run
# (`other_run_ids`), or that are abandoned invocations of this run (`abandoned_ids`).
OtherRunIds = Callable[[Collection[int]], Collection[int]]
CEILING_BY_SEVERITY: dict[str, Verdict] = {"none": "PASS", "low_confid": "LOW_CONFID", "reject": "REJECT"}
MAX_ERRORS = 500  # bounded audit; the count of omitted entries is reported


class GatekeeperCheck(BaseModel):
    """What the gatekeeper returns for one executor output.

    When the parse status is not valid, `verdict_ceiling`, `gatekeeper_result` and
    `verified_executor_output` are None and `verified_evidence` is empty; `rule_set_version` is
    reported in every case.
    """

    parse_status: ParseStatus
    parse_detail: str = ""
    route: Route
    verdict_ceiling: Verdict | None = None
    rule_set_version: str = ""
    gatekeeper_result: GatekeeperResult | None = None
    verified_executor_output: ExecutorEvidenceV2 | None = None
    verified_evidence: list[VerifiedEvidence] = Field(default_factory=list)

    def outcome(self) -> GatekeeperOutcome | None:
        """The graph's GatekeeperOutcome, or None when the output never parsed."""
        if self.gatekeeper_result is None or self.verdict_ceiling is None:
            return None
        return GatekeeperOutcome(
            gatekeeper_result=self.gatekeeper_result,
            verdict_ceiling=self.verdict_ceiling,
            verified_executor_output=self.verified_executor_output or ExecutorEvidenceV2(),
            verified_evidence=self.verified_evidence,
        )


class _Audit:
    def __init__(self) -> None:
        self.checked: list[CheckedBinding] = []
        self.failed_rules: list[str] = []
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.severity: Severity = "none"
        self.quoted = QuotedValues()
        self._omitted = 0

    def fail(self, where: str, finding: Finding) -> None:
        if finding.rule not in self.failed_rules:
            self.failed_rules.append(finding.rule)
        if SEVERITY_RANK[finding.severity] > SEVERITY_RANK[self.severity]:
            self.severity = finding.severity
        at = f"{where}.{finding.field}" if finding.field else where
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(f"{at}: {finding.rule}: {finding.detail}")
        else:
            self._omitted += 1
        self.quote(at, finding.quoted)

    def warn(self, message: str) -> None:
        if len(self.warnings) < MAX_ERRORS:
            self.warnings.append(message)

    def note(self, where: str, finding: Finding) -> None:
        """A finding that only warns (an optional field dropped)."""
        at = f"{where}.{finding.field}" if finding.field else where
        self.warn(f"{at}: {finding.detail}")
        self.quote(at, finding.quoted)

    def quote(self, at: str, value: object) -> None:
        if value is not NOTHING_QUOTED:
            self.quoted.add(at, value)

    def finish(self) -> None:
        if self._omitted:
            self.errors.append(f"{self._omitted} further error(s) omitted")
        if self.quoted.omitted:
            self.warnings.append(f"{self.quoted.omitted} further executor value(s) not kept")


def _decode(executor_output: Any) -> tuple[ParseStatus, str, dict[str, Any] | None]:
    if isinstance(executor_output, str):
        parsed = parse_executor_output(executor_output)
    else:
        parsed = check_contract_object(executor_output)
    return parsed.parse_status, parsed.detail, parsed.raw


def _where(shape: ClaimShape, binding_index: int) -> str:
    return f"claims[{shape.index}].evidence_bindings[{binding_index}]"


def _check_claim(
    shape: ClaimShape,
    index: InvocationIndex,
    excerpts: ExcerptChecker,
    paths: RefIndex,
    parameters: CheckParameters,
    audit: _Audit,
) -> list[PassedBinding]:
    where_claim = f"claims[{shape.index}]"
    for finding in shape.findings:
        audit.fail(where_claim, finding)
    claim_level = worst(shape.findings)
    passed: list[PassedBinding] = []
    for binding_index, binding in enumerate(shape.bindings):
        fields, findings = check_binding_shape(binding, parameters)
        for gap in fields.contract_gaps:
            audit.fail(_where(shape, binding_index), gap)  # caps the verdict; the evidence rules still decide the binding
        for dropped in fields.dropped:
            audit.note(_where(shape, binding_index), dropped)
        resolution = resolve_invocation(fields, index)
        findings += resolution.findings
        if resolution.warning:
            audit.warn(f"{_where(shape, binding_index)}: {resolution.warning}")
        ref = None
        invocation = resolution.invocation
        if invocation is not None:
            findings += invocation_state_findings(invocation)
            findings += polarity_findings(shape.claim_type, invocation)
            refs, path_findings = paths.refs_at_path(fields.raw_path, invocation)
            findings += path_findings
            if refs and fields.evidence_excerpt:
                ref, excerpt_findings = excerpts.check(fields.evidence_excerpt, refs)
                findings += excerpt_findings
        if findings:
            where = _where(shape, binding_index)
            for finding in findings:
                audit.fail(where, finding)
        decisive = worst(findings)
        if decisive is None and claim_level is not None:
            decisive = claim_level  # a dropped claim's bindings do not pass
        if decisive is None and invocation is not None and ref is not None:
            outcome = "backfilled" if resolution.backfilled else "passed"
            audit.checked.append(CheckedBinding(claim_id=shape.claim_id, binding_index=binding_index, outcome=outcome))
            passed.append(PassedBinding(fields, invocation, ref))
            continue
        if decisive is None:  # cannot happen: no finding yet nothing to check against
            decisive = Finding(EXCERPT_MISMATCH, "reject", "binding could not be checked")
            audit.fail(_where(shape, binding_index), decisive)
        audit.checked.append(
            CheckedBinding(
                claim_id=shape.claim_id,
                binding_index=binding_index,
                outcome="failed",
                rule=decisive.rule,
                severity=decisive.severity,
                detail=decisive.text[:300],
            )
        )
    return passed if shape.valid else []


def _run_rules(
    run_id: str,
    raw: dict[str, Any],
    invocations: list[ToolInvocation],
    catalog: RuleCatalog,
    other_run_ids: OtherRunIds | None,
    abandoned_ids: OtherRunIds | None = None,
) -> GatekeeperCheck:
    audit = _Audit()
    for finding in removed_field_findings(raw) + missing_list_findings(raw):
        audit.fail("output", finding)
    unknown, more_unknown = unknown_fields(raw)
    for at, name in unknown:
        audit.warn(f"{at}: unknown field ignored")
        audit.quote(at, name)
    if more_unknown:
        audit.warn(f"{more_unknown} further unknown field(s) ignored")
    side_lists = read_side_lists(raw, catalog)
    for warning in side_lists.warnings:
        audit.warn(warning)
    for at, value in side_lists.quoted:
        audit.quote(at, value)

    parameters = CheckParameters(catalog)
    excerpts = ExcerptChecker(parameters)
    paths = RefIndex()
    claims_raw: list[Any] = raw.get("claims", [])
    max_claims = catalog.int_parameter(SCHEMA_EXECUTOR_V2, "max_claims")
    if len(claims_raw) > max_claims:
        audit.fail(
            "output",
            Finding(SCHEMA_EXECUTOR_V2, "low_confid", f"{len(claims_raw) - max_claims} claim(s) beyond {max_claims} dropped"),
        )
        claims_raw = claims_raw[:max_claims]
    seen_ids: dict[str, int] = {}
    shapes = [check_claim_shape(item, claim_index, seen_ids, catalog) for claim_index, item in enumerate(claims_raw)]
    index = _invocation_index(run_id, invocations, shapes, other_run_ids, abandoned_ids)
    checked_claims = [(shape, _check_claim(shape, index, excerpts, paths, parameters, audit)) for shape in shapes]
    audit.finish()

    verified_output, verified_evidence = project(
        checked_claims, side_lists, catalog.int_parameter(EXCERPT_MISMATCH, "matched_text_max_chars")
    )
    ceiling = CEILING_BY_SEVERITY[audit.severity]
    status = "fail" if audit.failed_rules or audit.errors else ("warn" if audit.warnings else "pass")
    route: Route = "VERIFIER"
    if ceiling == "REJECT" or not verified_output.claims:
        route = "PRE_VERIFICATION_FALLBACK"
    result = GatekeeperResult(
        status=status,
        severity=audit.severity,
        checked_bindings=audit.checked,
        rules=catalog.enabled_rules(),
        failed_rules=audit.failed_rules,
        warnings=audit.warnings,
        errors=audit.errors,
        rule_set_version=catalog.rule_set_version,
        # The run's failed evidence calls, from the stored rows (not the output).
        failed_calls=failed_calls(invocations, run_id),
        executor_values=audit.quoted.values,
    )
    return GatekeeperCheck(
        parse_status="valid",
        route=route,
        verdict_ceiling=ceiling,
        rule_set_version=catalog.rule_set_version,
        gatekeeper_result=result,
        verified_executor_output=verified_output,
        verified_evidence=verified_evidence,
    )


def _invocation_index(
    run_id: str, invocations: list[ToolInvocation], shapes: list[ClaimShape], other_run_ids: OtherRunIds | None,
    abandoned_ids: OtherRunIds | None = None,
) -> InvocationIndex:
    """The index of the invocations passed in, told which of the other cited ids belong to another
    run or to an abandoned attempt of this one (one lookup each for the whole output; they learn
    membership only, never content)."""
    foreign: Collection[int] = ()
    abandoned: Collection[int] = ()
    cited = cited_invocation_ids(binding for shape in shapes for binding in shape.bindings)
    unknown = cited - {invocation.invocation_id for invocation in invocations}
    if unknown and abandoned_ids is not None:
        abandoned = abandoned_ids(sorted(unknown))
    if unknown and other_run_ids is not None:
        foreign = other_run_ids(sorted(unknown - set(abandoned)))
    return InvocationIndex(run_id, invocations, foreign, abandoned)


def _internal_failure(catalog: RuleCatalog, exc: BaseException) -> GatekeeperCheck:
    result = GatekeeperResult(
        status="fail",
        severity="reject",
        rules=catalog.enabled_rules(),
        errors=[f"gatekeeper could not check this output: {type(exc).__name__}"],
        rule_set_version=catalog.rule_set_version,
    )
    return GatekeeperCheck(
        parse_status="valid",
        route="PRE_VERIFICATION_FALLBACK",
        verdict_ceiling="REJECT",
        rule_set_version=catalog.rule_set_version,
        gatekeeper_result=result,
        verified_executor_output=ExecutorEvidenceV2(),
        verified_evidence=[],
    )


def check_executor_output(
    run_id: str,
    executor_output: dict[str, Any] | str,
    invocations: list[ToolInvocation],
    catalog: RuleCatalog | None = None,
    other_run_ids: OtherRunIds | None = None,
    abandoned_ids: OtherRunIds | None = None,
) -> GatekeeperCheck:
    """Parse (when given text) and check one executor output for run `run_id`. Never raises.

    `invocations` are trusted rows from the store; rows of other runs may be included and are
    never cited successfully. `other_run_ids`, when given, is asked once which of the cited ids
    that are not among `invocations` exist in another run, so that citing one is reported as
    such (still `evidence.invocation_ref` / reject) rather than as a missing invocation.
    `abandoned_ids` likewise names the cited ids that are abandoned invocations of this run:
    a lost attempt's call is not citable, exactly as one the run does not own
    (`evidence.invocation_ref` / reject); an abandoned row passed in is treated the same way.
    """
    catalog = catalog or shared_default_catalog()  # read only here
    try:
        parse_status, detail, raw = _decode(executor_output)
    except Exception as exc:  # noqa: BLE001 — the parser never raises; this is a last guard
        parse_status, detail, raw = "malformed", f"unparseable output: {type(exc).__name__}", None
    if parse_status != "valid" or raw is None:
        return GatekeeperCheck(
            parse_status=parse_status if parse_status != "valid" else "malformed",
            parse_detail=detail,
            route="PRE_VERIFICATION_FALLBACK",
            rule_set_version=catalog.rule_set_version,
        )
    try:
        check = _run_rules(run_id, raw, invocations, catalog, other_run_ids, abandoned_ids)
    except Exception as exc:  # noqa: BLE001 — fail closed, never raise to the caller
        check = _internal_failure(catalog, exc)
    check.parse_detail = detail
    return check
