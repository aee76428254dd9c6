"""Domain models shared by every role: the JSON shapes of the specs, as pydantic models.

Field names and enum values are the specs' own spelling. Services convert these to and from the
protobuf contracts at their edges (`shared.proto_convert`); domain logic only sees these models.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from shared.core.structured_answer import StructuredAnswer
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE, QUERY_CHANGES, QUERY_LOGS, QUERY_METRICS

# --- fixed value sets (spelled as the specs spell them) ----------------------------------------

ClaimType = Literal[
    "observation", "negative_observation", "symptom", "root_cause", "impact", "risk", "context"
]
CLAIM_TYPES: tuple[str, ...] = get_args(ClaimType)
# DESIGN §3 decision: every claim type except `context` is critical.
CRITICAL_CLAIM_TYPES: frozenset[str] = frozenset(CLAIM_TYPES) - {"context"}

SupportLevel = Literal["direct", "indirect"]
SUPPORT_LEVELS: tuple[str, ...] = get_args(SupportLevel)

ParseStatus = Literal["valid", "missing", "malformed"]
Lifecycle = Literal["PROJECTING", "READY", "ERROR"]
EvidenceStatus = Literal["EVIDENCE_FOUND", "NO_EVIDENCE", "ERROR"]
Verdict = Literal["PASS", "LOW_CONFID", "REJECT"]
VERDICT_ORDER: dict[str, int] = {"REJECT": 0, "LOW_CONFID": 1, "PASS": 2}
GatekeeperStatus = Literal["pass", "warn", "fail"]
Severity = Literal["none", "low_confid", "reject"]
Verification = Literal[
    "direct_observation",
    "reasonable_inference",
    "overstated",
    "unsupported",
    "external_unknown",
    "contradicted",
]
VERIFICATIONS: tuple[str, ...] = get_args(Verification)
LegacyVerification = Literal["direct_evidence", "indirect_support", "no_evidence", "contradicted"]
PlannerMode = Literal["NORMAL", "EVIDENCE_GAP_ONLY"]
DiagnosisMode = Literal["MULTI_AGENT", "SINGLE_REACT"]
BindingOutcome = Literal["passed", "failed", "backfilled"]
VerifierStatus = Literal["COMPLETED", "FAILED", "SKIPPED"]
AnalysisKind = Literal["NORMAL", "NEGATIVE_OBSERVATION"]
SemanticVerdict = Literal["SUPPORTED", "UNSUPPORTED"]
ReleaseOutcome = Literal["SUCCESS", "FALLBACK"]
FallbackType = Literal[
    "EVIDENCE_VALIDATION_FAILED",
    "SEMANTIC_UNSUPPORTED",
    "SEMANTIC_UNAVAILABLE",
    "MISSING_REQUIRED_CONTEXT",
    "INSUFFICIENT_EVIDENCE",
    # multi-agent graph: handled fallback before the Verifier produced a verdict
    "PRE_VERIFICATION",
    # an addition to the specs' set: every service the question named is unknown
    "UNKNOWN_SERVICE",
    # additions to the specs' set: single-ReAct stopped with an empty verified snapshot
    "AGENT_UNAVAILABLE",  # the agent's model failed before any check was verified
    "NO_VERIFIED_PROGRESS",  # the agent stopped (budget, progress protocol, no conclusion) with nothing verified
    # additions, both retryable: the run's gateway stopped and a reaper ended the run; single-ReAct's
    # gatekeeper could not be reached
    "RUN_INTERRUPTED",
    "GUARD_UNAVAILABLE",
]
# What made the graph fall back before a verdict (our categories; they decide the fixed text).
FallbackCause = Literal["TECHNICAL_FAILURE", "CITATION_CHECK_FAILED", "INVALID_OUTPUT", "NO_VERIFIED_CLAIM"]

EVIDENCE_TOOLS: frozenset[str] = frozenset(
    {QUERY_METRICS, QUERY_LOGS, LOOKUP_KNOWLEDGE, QUERY_CHANGES}
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=False)


# --- tools and invocations ----------------------------------------------------------------------


class EvidenceRef(_Model):
    """One addressable piece of evidence inside one invocation (DESIGN §2)."""

    raw_path: str
    text: str
    source: str = ""
    timestamp: str = ""


class RetrievalDetails(_Model):
    """An invocation's evidence refs. An evidence tool's call stores them as a view of its result
    (`refs_rendered`: rendered on demand, `shared/core/evidence_view.py`) with the backend's name
    and the refs' count; `evidence_refs` is an explicit list (rows written before the view, and
    documents handed to the gatekeeper's CLI)."""

    evidence_refs: list[EvidenceRef] = Field(default_factory=list)
    deduped: bool = False
    source: str = ""
    refs_rendered: bool = False
    ref_count: int = 0


class ToolInvocation(_Model):
    invocation_id: int
    run_id: str
    tool_call_id: str = ""
    tool_name: str
    round: int = 0
    lifecycle: Lifecycle = "PROJECTING"
    evidence_status: EvidenceStatus | None = None
    request: dict[str, Any] = Field(default_factory=dict)
    agent_result: str | None = None
    retrieval_details: RetrievalDetails | None = None
    error: str = ""
    # Which attempt of (run, round) wrote it, and whether a later attempt superseded it:
    # an abandoned invocation is kept for the audit and never cited or counted.
    attempt: int = 0
    abandoned: bool = False
    _view: Any = PrivateAttr(default=None)  # shared.core.evidence_view's cache

    def __eq__(self, other: object) -> bool:
        """Equal records: the same fields (the view cached on one is no part of the record)."""
        if not isinstance(other, ToolInvocation):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__


class PlannedToolCall(_Model):
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    purpose: str = ""


class TimeWindow(_Model):
    start: str  # ISO-8601, UTC
    end: str


QuestionKind = Literal["why", "health", "yes_no", "what"]


class QuestionIntent(_Model):
    """What a question asks for, read once from its words (`shared.core.question_intent`) and
    carried on the wire from there (Plan.intent, RunAgentRequest.intent, ComposerInput.intent)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    kind: QuestionKind = "what"
    text: str = ""  # the question (or the part of a compound one) this reads
    hypothesis: str = ""  # yes_no: the clause that states the hypothesis, as the user wrote it
    hypothesis_symptoms: tuple[str, ...] = ()  # symptom ids it names, most specific first
    hypothesis_services: tuple[str, ...] = ()  # services it names besides the subject
    hypothesis_change: bool = False  # the hypothesis is that a change caused it
    change_kind: Literal["release", "config", "migration", ""] = ""  # which kind of change it names
    blamed: tuple[str, ...] = ()  # hosts and services it blames (「是不是 pay.internal 挂了」)
    subject_services: tuple[str, ...] = ()
    triage: bool = False  # names no service and asks which services are abnormal (kind health)
    confirmation: bool = False  # asks to confirm something: a narrow answer
    # Signal kind -> the direction the question says it moved (「命中率为什么降了」: hit_ratio down).
    stated_directions: dict[str, Literal["up", "down"]] = Field(default_factory=dict)
    # A compound question's other sub-questions, each read standalone, in the order asked.
    parts: tuple[QuestionIntent, ...] = ()


class Plan(_Model):
    mode: PlannerMode = "NORMAL"
    services: list[str] = Field(default_factory=list)
    symptoms: list[str] = Field(default_factory=list)
    window: TimeWindow | None = None
    steps: list[PlannedToolCall] = Field(default_factory=list)
    missing_context: list[str] = Field(default_factory=list)
    rationale: str = ""
    # Named by the question but given no steps (the planner's bound on names per question).
    unchecked_services: list[str] = Field(default_factory=list)
    # The question names no service and asks which are abnormal: the executor checks the services
    # of its catalogue (set by the planner from `intent`, unless the question follows up another).
    triage: bool = False
    # What the question asks for, read by the planner service from the query, whatever engine
    # planned (never taken from a model).
    intent: QuestionIntent | None = None


class UnknownService(_Model):
    """A name the question used as a service that the backends' catalogue does not know."""

    name: str
    suggestions: list[str] = Field(default_factory=list)


class ServiceCoverage(_Model):
    """Which named services were checked: resolved by the executor against its
    backends' catalogue before any step runs. Answers name the unknown and the unchecked ones
    from this data, never from model text."""

    named: list[str] = Field(default_factory=list)
    checked: list[str] = Field(default_factory=list)
    unknown: list[UnknownService] = Field(default_factory=list)
    unchecked: list[str] = Field(default_factory=list)
    limit: int = 0
    catalogue_unavailable: bool = False
    # A triage question: the services come from the catalogue (`named`), not from the question.
    triage: bool = False
    catalogue_size: int = 0

    @property
    def partial(self) -> bool:
        """Some named service was not checked (unknown, or beyond the limit)."""
        return bool(self.unknown or self.unchecked)

    @property
    def nothing_known(self) -> bool:
        """Services were named, some are unknown and none could be checked: nothing may be
        queried, and the answer is about the names."""
        return bool(self.named) and not self.checked and bool(self.unknown)


# --- typed statements (docs/statements.md) --------------------------------------------------------

StatementState = Literal["rise", "fall", "level", "normal", "absent", "present", "event"]
MAX_STATEMENT_ITEMS = 20  # quantities and refs of one statement
QuantityAggregate = Literal["point", "max", "min", "median", "count", "ratio"]
Standing = Literal["observed", "inferred", "hypothesis"]
# What a quantity is in an episode of its series (docs/statements.md); None: a plain value.
QuantityRole = Literal["peak", "baseline", "onset", "end", "latest"]
SignalKind = Literal["metric", "log", "change"]
ActionKind = Literal["next_step", "remedy"]
# What a single-ReAct conclusion answers; its opening is rendered from it (shared/core/direct_answer.py).
ConclusionKind = Literal["finding", "cause_named", "cause_unconfirmed", "healthy", "found", "yes", "no",
                         "cannot_confirm"]


class StatementRef(_Model):
    """A ref a statement rests on: by invocation id (multi-agent) or by the tool_call_id an
    Analysis cites (single-ReAct; SemanticGuard sees the snapshot's evidence_key in its place)."""

    source_invocation_id: int = 0
    raw_path: str
    tool_call_id: str = Field(default="", max_length=200)


class Signal(_Model):
    kind: SignalKind
    name: str = Field(default="", max_length=500)  # metric id, words of a log line, or change kind
    level: str = Field(default="", max_length=20)  # log: the level the lines carry (ERROR, WARN …)


class Quantity(_Model):
    value: float
    unit: str = ""  # normalised as shared.core.evidence_facts normalises a tool's unit
    aggregate: QuantityAggregate = "point"
    at: str = ""  # ISO-8601 UTC instant; empty when the quantity is over `window`
    window: TimeWindow | None = None
    precision: int = Field(default=0, ge=0, le=6)  # decimal places the value is stated to
    role: QuantityRole | None = None
    instance: str = Field(default="", max_length=200)  # `pod=checkout-7f9c`: the instance a value is of


class CauseLink(_Model):
    cause: Statement
    effect: Statement
    mechanism: str = ""  # a failure-mode catalogue id


class ActionRef(_Model):
    mechanism: str
    kind: ActionKind
    index: int = Field(ge=0)


class Statement(_Model):
    """What a claim, hypothesis, action or missing-info item says, as data (DESIGN §3, 2026-12-03).
    Bounded: a model writes it, so lists are short and a cause's two sides carry no cause."""

    subject: str = Field(default="", max_length=200)
    signal: Signal | None = None
    state: StatementState | None = None
    quantities: list[Quantity] = Field(default_factory=list, max_length=MAX_STATEMENT_ITEMS)
    cause: CauseLink | None = None
    standing: Standing = "observed"
    refs: list[StatementRef] = Field(default_factory=list, max_length=MAX_STATEMENT_ITEMS)
    action: ActionRef | None = None
    at: str = ""  # an event's instant (ISO-8601 UTC): the cited line's or change record's
    span: TimeWindow | None = None  # lines present: the first and the last cited line's instants
    actor: str = Field(default="", max_length=200)  # a change: who made it, as the record names them

    @model_validator(mode="after")
    def _one_level_of_cause(self) -> Statement:
        if self.cause is not None and (self.cause.cause.cause is not None or self.cause.effect.cause is not None):
            raise ValueError("a cause's cause and effect are statements without a cause of their own")
        return self


CauseLink.model_rebuild()


# --- executor_evidence_v2 -------------------------------------------------------------------------


class EvidenceBinding(_Model):
    source_type: str = ""
    tool_name: str = ""
    source_invocation_id: int | None = None
    source_invocation_ids: list[int] = Field(default_factory=list)
    raw_path: str | None = None
    evidence_excerpt: str = ""
    source_id: str | None = None


class Claim(_Model):
    claim_id: str
    claim_type: ClaimType
    claim_text: str
    support_level: SupportLevel
    evidence_bindings: list[EvidenceBinding] = Field(default_factory=list)
    statement: Statement | None = None


class Hypothesis(_Model):
    text: str
    related_claim_ids: list[str] = Field(default_factory=list)
    statement: Statement | None = None


class RecommendedAction(_Model):
    text: str
    requires_human_confirmation: bool = True
    statement: Statement | None = None


class MissingInfo(_Model):
    text: str
    tool_name: str = ""
    statement: Statement | None = None


class ExecutorEvidenceV2(_Model):
    answer_version: Literal["executor_evidence_v2"] = "executor_evidence_v2"
    claims: list[Claim] = Field(default_factory=list)
    hypotheses: list[Hypothesis] = Field(default_factory=list)
    recommended_actions: list[RecommendedAction] = Field(default_factory=list)
    missing_info: list[MissingInfo] = Field(default_factory=list)


# --- gatekeeper -----------------------------------------------------------------------------------


class CheckedBinding(_Model):
    claim_id: str
    binding_index: int
    outcome: BindingOutcome
    rule: str = ""
    severity: Severity = "none"
    detail: str = ""


class RuleMetadata(_Model):
    id: str
    description: str = ""
    enabled: bool = True
    default_severity: Severity = "none"
    parameters: dict[str, Any] = Field(default_factory=dict)


class FailedCall(_Model):
    """One evidence tool call whose backend failed, in our categories: read
    from the stored invocation (`shared.failed_calls`), never from model or backend text."""

    tool_name: str
    invocation_id: int
    round: int = 0
    scope: str = ""
    service: str = ""
    # unreachable | timeout | http_error | not_backend_response | failed
    error_class: str = "failed"
    http_status: int = 0
    # A later round ran the same tool for the same service successfully.
    recovered: bool = False


class EmptyScope(_Model):
    """A checked service and window whose evidence cannot show health ("No data is not health"),
    read from the stored invocations (`shared.no_data`), never from model or backend text.

    state: `no_data` — every metrics call of it found no series (or, when it named metrics, none of
    those) and every logs call counted no line of any level; `unclassified` — its logs hold lines
    whose level could not be read and no line at a bad level was found."""

    service: str
    start: str = ""  # ISO-8601, UTC
    end: str = ""
    state: Literal["no_data", "unclassified"] = "no_data"
    # A metrics call asking for every series found none.
    metrics_empty: bool = False
    # The metrics a call named that had no data (the service may hold others).
    empty_metrics: list[str] = Field(default_factory=list)
    # A logs call counted no line of any level over the window.
    logs_empty: bool = False
    # Lines of the window whose level could not be read (state `unclassified`).
    unclassified_lines: int = 0
    invocation_ids: list[int] = Field(default_factory=list)


class ExecutorValue(_Model):
    """A value the executor wrote that the audit names by position (`at`): escaped (control
    characters visible) and bounded, with the original's length. Persisted with the run; never
    given to a model (`GatekeeperResult.for_verifier`)."""

    at: str
    value: str
    chars: int = 0


class GatekeeperResult(_Model):
    status: GatekeeperStatus
    severity: Severity
    checked_bindings: list[CheckedBinding] = Field(default_factory=list)
    rules: list[RuleMetadata] = Field(default_factory=list)
    failed_rules: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    rule_set_version: str = ""
    # Graph spec: "failed evidence remains a verifier-visible gap".
    failed_calls: list[FailedCall] = Field(default_factory=list)
    # The executor's own strings behind the positions named above, for the persisted audit only.
    executor_values: list[ExecutorValue] = Field(default_factory=list)

    def for_verifier(self) -> GatekeeperResult:
        """The audit a verifier receives: positions and our words only ("Nothing a model wrote
        reaches another model unescaped")."""
        return self.model_copy(update={"executor_values": []})


class StatedValue(_Model):
    """One value a ref states: `value` (one observation) or `min`/`median`/`max` over its window."""

    name: str
    value: float
    unit: str = ""
    at: str = ""  # ISO-8601 UTC; empty where the ref does not state when


class RefFacts(_Model):
    """What one evidence ref states, read from the stored tool result (`shared.core.evidence_facts`).

    kind: metric_point | metric_summary | metric_onset | metric_end | metric_scope | log_line | log_scope | change |
    change_scope | knowledge.
    """

    kind: str
    subject: str = ""
    metric: str = ""
    at: str = ""
    window_start: str = ""
    window_end: str = ""
    values: list[StatedValue] = Field(default_factory=list)
    level: str = ""
    item_count: int = 0
    empty: bool = False
    filter: str = ""
    first_of_kind: bool = False  # log_line: the first line of its kind in the read
    signature: str = ""  # log_line: its message with ids and numbers masked
    change_kind: str = ""  # change: the record's kind
    onset: str = ""  # metric_summary: the direction of its series' onset ("up", "down"), "" with none
    raw_path: str = ""  # set in a single-ReAct snapshot, where typed statements name refs by it
    # metric_summary: whether its series moved the bad way (`shared.core.metric_anomaly.read_series`):
    # rise | fall | quiet | unclear; "" when read without its series.
    series_state: str = ""
    ongoing: bool = False  # metric_point: its series' last point, the move (an onset) not ended by then
    actor: str = ""  # change: who made it


class VerifiedEvidence(_Model):
    claim_id: str
    source_invocation_id: int
    tool_name: str
    raw_path: str
    matched_text: str
    facts: RefFacts | None = None


class GatekeeperOutcome(_Model):
    """Everything the gatekeeper hands back to the graph for one executor output."""

    gatekeeper_result: GatekeeperResult
    verdict_ceiling: Verdict
    verified_executor_output: ExecutorEvidenceV2
    verified_evidence: list[VerifiedEvidence] = Field(default_factory=list)


# --- verifier -------------------------------------------------------------------------------------


class VerifierEvidenceRef(_Model):
    trace_ref: str = ""
    tool_name: str = ""
    source_invocation_ids: list[int] = Field(default_factory=list)
    raw_path: str = ""
    claim_id: str = ""
    note: str = ""


class ClaimCheck(_Model):
    claim_id: str
    claim_text: str = ""
    claim_type: str = ""
    verification: Verification
    detail: str = ""
    evidence_refs: list[VerifierEvidenceRef] = Field(default_factory=list)
    # The deterministic check that decided the verification (empty: the engine's own judgement).
    check_id: str = ""
    # A key entity, error code or cause absent from the evidence: REJECT, never retried.
    fabricated_key: bool = False


class SideTextCheck(_Model):
    """A model-written side text and whether the answer may show it (shown only when grounded)."""

    item: str  # hypotheses[i] | recommended_actions[i] | missing_info[i]
    text: str = ""
    shown: bool = False
    check_id: str = ""
    detail: str = ""
    requires_human_confirmation: bool = False


class FactCheck(_Model):
    fact: str
    is_critical: bool
    verification: LegacyVerification
    detail: str = ""
    evidence_refs: list[VerifierEvidenceRef] = Field(default_factory=list)


class VerifierOutput(_Model):
    verdict: Verdict
    groundedness_score: float = Field(ge=0.0, le=1.0)
    critical_fact_count: int = 0
    claim_checks: list[ClaimCheck] = Field(default_factory=list)
    facts_checked: list[FactCheck] = Field(default_factory=list)
    rationale: str = ""
    side_text_checks: list[SideTextCheck] = Field(default_factory=list)


class EvidenceGap(_Model):
    claim_id: str
    claim_text: str = ""
    verification: Verification
    services: list[str] = Field(default_factory=list)
    tool_names: list[str] = Field(default_factory=list)


class RetryContext(_Model):
    evidence_retry_count: int = 0
    gaps: list[EvidenceGap] = Field(default_factory=list)


class DiagnosisContext(_Model):
    query: str
    services: list[str] = Field(default_factory=list)
    window: TimeWindow | None = None
    round: int = 0


class VerifierInput(_Model):
    """The verified-only payload (graph spec: 'Verifier SHALL consume explicit verification inputs')."""

    diagnosis_context: DiagnosisContext
    verified_executor_output: ExecutorEvidenceV2
    verified_evidence: list[VerifiedEvidence]
    gatekeeper_audit: GatekeeperResult
    verdict_ceiling: Verdict
    retry_context: RetryContext | None = None


class EffectiveVerdict(_Model):
    effective_verdict: Verdict
    groundedness_score: float
    critical_fact_count: int
    facts_checked: list[FactCheck]
    upper_bound: Verdict


# --- composer -------------------------------------------------------------------------------------


class VerifiedSource(_Model):
    """One completed tool call of the run, as the store recorded it: tool, invocation id and the
    scope of the call (service, time window) read from the persisted request."""

    tool_name: str
    invocation_id: int
    scope: str = ""
    # prometheus | loki | estate | changes_db | knowledge_dir | demo_knowledge
    # (`shared/evidence_source.py`), from the call's stored evidence refs; "" when unknown.
    source_kind: str = ""


class ComposerInput(_Model):
    query: str
    effective_verdict: Verdict | None = None
    verified_executor_output: ExecutorEvidenceV2 = Field(default_factory=ExecutorEvidenceV2)
    claim_checks: list[ClaimCheck] = Field(default_factory=list)
    fallback_type: FallbackType | None = None
    fallback_reason: str = ""
    side_text_checks: list[SideTextCheck] = Field(default_factory=list)
    fallback_cause: FallbackCause | None = None
    failed_rules: list[str] = Field(default_factory=list)
    service_coverage: ServiceCoverage | None = None
    # With NO_VERIFIED_CLAIM: the run's completed tool calls, from the store (never
    # model text), listed as 已核实的数据来源.
    verified_sources: list[VerifiedSource] = Field(default_factory=list)
    # The run's failed evidence calls; the answer names each one.
    failed_calls: list[FailedCall] = Field(default_factory=list)
    # The evidence tools disabled for want of a source; named in the scope.
    disabled_tools: list[str] = Field(default_factory=list)
    # Checked services and windows whose evidence cannot show health (no data, or logs of
    # unknown level): the answer says 无法确认 and names them, never 未发现异常.
    empty_scopes: list[EmptyScope] = Field(default_factory=list)
    # The plan's reading of the question: the first line answers it. None from a caller that sends
    # only the query: the composer service reads it once at its edge.
    intent: QuestionIntent | None = None


class ComposerOutput(_Model):
    answer: str
    sections: dict[str, list[str]] = Field(default_factory=dict)
    template: str = ""
    used_fallback_template: bool = False
    # Why the fixed template was used (fallback type, rejected model output, failed model call).
    fallback_reason: str = ""
    # The answer as a structure; `answer` is its rendering (shared/core/structured_answer.py).
    structured_answer: StructuredAnswer | None = None


# --- prompt audit ---------------------------------------------------------------------------------


class PromptRef(_Model):
    role: str
    name: str
    version: str


class PromptAudit(_Model):
    version: str
    prompts: list[PromptRef] = Field(default_factory=list)


class TokenUsage(_Model):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ToolTraceSummaryEntry(_Model):
    trace_ref: str
    source_invocation_ids: list[int] = Field(default_factory=list)
    tool_name: str
    success: bool
    input_summary: str = ""
    output_summary: str = ""
    evidence_level: str = ""
