"""`schema.executor_v2`: the contract at output, claim and binding level (severity low_confid).

Graph spec, "Executor Gatekeeper SHALL validate deterministic structured-output failures":
removed fields, claims without bindings, unknown enum values. A claim failing here is dropped from
the verified projection; its bindings are still checked by the evidence rules, so a malformed claim
cannot hide a fabricated citation behind a mere low_confid.

The contract's required fields that a reader can do without are still required. An output without
`hypotheses`, `recommended_actions` or `missing_info` ("Executor V2 final output contains only
structured diagnostic fields"), and a binding without `source_type` (or with one that is not a
bounded token), fail `schema.executor_v2` at its severity, low_confid, and are named in
`failed_rules`. Such a binding's `contract_gaps` cap the verdict but do not decide the binding: its
evidence is still checked and, when precise, still verified.

A binding without an invocation id is not a schema failure, however the absence is spelled (no
field, null, an empty list): DESIGN §3 ruling "Compatibility backfill" gives it one outcome, the
backfill or `evidence.invocation_ref` (`invocation_rules.resolve_invocation`).

A claim id must match `^[A-Za-z0-9_-]{1,16}$`. Every finding names its place (`claim_type`,
`raw_path` …) and carries the executor's value there only as `quoted`, for the persisted audit
(`quoted_values.py`): nothing here puts an executor string into a detail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from services.gatekeeper.findings import NOTHING_QUOTED, Finding
from services.gatekeeper.quoted_values import CLAIM_ID, SOURCE_ID, is_token
from services.gatekeeper.rule_catalog import SCHEMA_EXECUTOR_V2, CatalogParameters, RuleCatalog
from shared.config import configured_failure_modes
from shared.core.contracts import CLAIM_TYPES, SUPPORT_LEVELS, Hypothesis, MissingInfo, RecommendedAction, Statement
from shared.core.statement_facts import changes_state, check_statement
from shared.core.statement_render import render_statement

REMOVED_FIELDS: tuple[str, ...] = ("diagnosis_summary", "user_facing_answer")


def _schema(detail: str, field: str = "", quoted: Any = NOTHING_QUOTED) -> Finding:
    return Finding(SCHEMA_EXECUTOR_V2, "low_confid", detail, field, quoted)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


REQUIRED_LISTS: tuple[str, ...] = ("hypotheses", "recommended_actions", "missing_info")


def removed_field_findings(raw: dict[str, Any]) -> list[Finding]:
    return [_schema(f"output contains removed field {name!r}") for name in REMOVED_FIELDS if name in raw]


def missing_list_findings(raw: dict[str, Any]) -> list[Finding]:
    """The contract's required side lists (an empty list is fine; an absent one is not)."""
    return [_schema(f"output without required field {name!r}") for name in REQUIRED_LISTS if name not in raw]


@dataclass
class ClaimShape:
    index: int
    claim_id: str  # the claim's id, or `claims[i]` when it has no valid one
    claim_type: str | None  # None when absent or unknown
    claim_text: str  # empty for a typed claim: projection.py writes its sentence
    support_level: str | None
    bindings: list[Any]
    findings: list[Finding] = field(default_factory=list)
    statement: Statement | None = None  # the claim's typed statement; claim_text is rendered from it

    @property
    def valid(self) -> bool:
        return not self.findings


def check_claim_shape(item: Any, index: int, seen_ids: dict[str, int], catalog: RuleCatalog) -> ClaimShape:
    """`seen_ids` maps the valid claim ids seen so far to their claim's index."""
    placeholder = f"claims[{index}]"
    if not isinstance(item, dict):
        shape = ClaimShape(index, placeholder, None, "", None, [])
        shape.findings.append(_schema(f"claim is {type(item).__name__}, not an object"))
        return shape
    findings: list[Finding] = []
    raw_id = item.get("claim_id")
    claim_id = raw_id.strip() if isinstance(raw_id, str) else ""
    if not claim_id:
        findings.append(_schema("claim_id missing or blank", "claim_id",
                                NOTHING_QUOTED if raw_id is None or raw_id == "" else raw_id))
        claim_id = placeholder
    elif not CLAIM_ID.fullmatch(claim_id):
        findings.append(_schema(f"not a claim id (^{CLAIM_ID.pattern}$)", "claim_id", raw_id))
        claim_id = placeholder
    elif claim_id in seen_ids:
        findings.append(_schema(f"repeats the claim_id of claims[{seen_ids[claim_id]}]", "claim_id"))
    else:
        seen_ids[claim_id] = index
    statement = None
    if item.get("statement") is not None:
        try:
            statement = Statement.model_validate(item["statement"])
        except ValidationError as exc:
            findings.append(_schema(f"statement does not fit the contract ({exc.error_count()} error(s))", "statement"))
    claim_text = item.get("claim_text")
    max_text = catalog.int_parameter(SCHEMA_EXECUTOR_V2, "max_claim_text_chars")
    if statement is not None:
        # Attest writes the sentence of a typed claim once its bindings are verified (projection.py,
        # with a verified excerpt as its quote); the model's own words are not shown.
        claim_text = ""
    elif not isinstance(claim_text, str) or not claim_text.strip():
        findings.append(_schema("claim_text missing or blank"))
        claim_text = ""
    elif len(claim_text) > max_text:
        findings.append(_schema(f"claim_text longer than {max_text} characters"))
    claim_type = item.get("claim_type")
    if claim_type not in CLAIM_TYPES:
        findings.append(_schema("not a claim_type of the contract", "claim_type", claim_type))
        claim_type = None
    support_level = item.get("support_level")
    if support_level not in SUPPORT_LEVELS:
        findings.append(_schema("not a support_level of the contract", "support_level", support_level))
        support_level = None
    bindings = item.get("evidence_bindings")
    if not isinstance(bindings, list) or not bindings:
        findings.append(_schema("claim has no evidence_bindings"))
        bindings = []
    max_bindings = catalog.int_parameter(SCHEMA_EXECUTOR_V2, "max_bindings_per_claim")
    if len(bindings) > max_bindings:
        findings.append(_schema(f"more than {max_bindings} evidence_bindings"))
        bindings = bindings[:max_bindings]
    return ClaimShape(index, claim_id, claim_type, claim_text, support_level, bindings, findings, statement)


@dataclass
class BindingFields:
    """A binding's fields, type-checked; a field of the wrong type reads as absent."""

    tool_name: str = ""
    evidence_excerpt: str = ""
    source_invocation_id: int | None = None
    source_invocation_ids: list[int] = field(default_factory=list)
    raw_path: str = ""
    source_type: str = ""
    source_id: str | None = None
    # Required fields that are absent or unusable: low_confid, not decisive for the binding.
    contract_gaps: list[Finding] = field(default_factory=list)
    # Optional fields dropped as unusable: audit warnings only.
    dropped: list[Finding] = field(default_factory=list)


def check_binding_shape(binding: Any, catalog: CatalogParameters) -> tuple[BindingFields, list[Finding]]:
    fields = BindingFields()
    if not isinstance(binding, dict):
        return fields, [_schema(f"binding is {type(binding).__name__}, not an object")]
    findings: list[Finding] = []
    tool_name = binding.get("tool_name")
    if isinstance(tool_name, str) and tool_name.strip():
        fields.tool_name = tool_name.strip()  # compared with stored rows only, never shown
    else:
        findings.append(_schema("binding without tool_name", "tool_name",
                                NOTHING_QUOTED if tool_name is None else tool_name))
    excerpt = binding.get("evidence_excerpt")
    max_excerpt = catalog.int_parameter(SCHEMA_EXECUTOR_V2, "max_excerpt_chars")
    if not isinstance(excerpt, str) or not excerpt.strip():
        findings.append(_schema("blank evidence_excerpt", "evidence_excerpt",
                                NOTHING_QUOTED if excerpt is None else excerpt))
    elif len(excerpt) > max_excerpt:
        findings.append(_schema(f"longer than {max_excerpt} characters", "evidence_excerpt", excerpt))
    else:
        fields.evidence_excerpt = excerpt
    single = binding.get("source_invocation_id")
    if single is not None:
        if _is_int(single):
            fields.source_invocation_id = single
        else:
            findings.append(_schema("not an integer", "source_invocation_id", single))
    plural = binding.get("source_invocation_ids")
    if plural is not None:
        if isinstance(plural, list) and all(_is_int(value) for value in plural) and len(plural) <= 100:
            fields.source_invocation_ids = list(plural)
        else:
            findings.append(_schema("not a list of integers", "source_invocation_ids", plural))
    raw_path = binding.get("raw_path")
    if raw_path is not None:
        if isinstance(raw_path, str):
            fields.raw_path = raw_path.strip()
        else:
            findings.append(_schema("not a string", "raw_path", raw_path))
    source_type = binding.get("source_type")
    if not isinstance(source_type, str) or not source_type.strip():
        fields.contract_gaps.append(_schema("binding without source_type", "source_type",
                                            NOTHING_QUOTED if source_type is None else source_type))
    elif not is_token(source_type.strip()):
        # It would reach the verifier in the verified projection: a token or nothing.
        fields.contract_gaps.append(_schema("not a source type token", "source_type", source_type))
    else:
        fields.source_type = source_type.strip()
    source_id = binding.get("source_id")
    if source_id is not None:
        if is_token(source_id, SOURCE_ID):
            fields.source_id = source_id
        else:
            fields.dropped.append(_schema("not a source id token; dropped", "source_id", source_id))
    return fields, findings


@dataclass
class SideLists:
    hypotheses: list[Hypothesis]
    recommended_actions: list[RecommendedAction]
    missing_info: list[MissingInfo]
    warnings: list[str]
    # (position, the executor's value there) behind warnings, for the persisted audit only.
    quoted: list[tuple[str, Any]] = field(default_factory=list)


def _item_text(item: Any) -> str | None:
    if isinstance(item, str):
        return item
    text = item.get("text") if isinstance(item, dict) else None
    return text if isinstance(text, str) else None


def _typed_action(raw: Any) -> RecommendedAction | None:
    """A recommended action typed as a step of the failure-mode catalogue: its text is the
    catalogue's and its need for confirmation follows from its kind, whatever the model wrote."""
    try:
        statement = Statement.model_validate(raw)
    except ValidationError:
        return None
    modes = configured_failure_modes()
    if statement.action is None or check_statement(statement, lambda ref: None, modes):
        return None
    return RecommendedAction(text=render_statement(statement, None, modes=modes),
                             requires_human_confirmation=changes_state(statement), statement=statement)


def _typed_hypothesis(item: dict[str, Any]) -> Hypothesis | None:
    """A hypothesis typed as a statement: its sentence is Attest's (the verifier checks its fields
    against the verified evidence before anyone sees it)."""
    try:
        statement = Statement.model_validate(item["statement"])
    except ValidationError:
        return None
    if statement.action is not None or not statement.refs:
        return None  # it may propose a cause, never about something no ref of the run shows
    related = item.get("related_claim_ids")
    ids = [r for r in related if isinstance(r, str)][:20] if isinstance(related, list) else []
    statement = statement.model_copy(update={"standing": "hypothesis"})  # put forward, never observed
    return Hypothesis(text=render_statement(statement, None, modes=configured_failure_modes()),
                      related_claim_ids=ids, statement=statement)


def read_side_lists(raw: dict[str, Any], catalog: RuleCatalog) -> SideLists:
    """hypotheses / recommended_actions / missing_info: kept as possibilities, never as facts.

    Items may be strings or objects with `text`; unreadable, blank or over-long items and items
    beyond the limit are dropped with a warning (they are not confirmed claims, so no severity).
    """
    max_items = catalog.int_parameter(SCHEMA_EXECUTOR_V2, "max_list_items")
    max_chars = catalog.int_parameter(SCHEMA_EXECUTOR_V2, "max_item_text_chars")
    warnings: list[str] = []
    quoted: list[tuple[str, Any]] = []
    kept: dict[str, list[Any]] = {"hypotheses": [], "recommended_actions": [], "missing_info": []}
    for name in kept:
        items = raw.get(name) or []
        if not isinstance(items, list):
            continue
        if len(items) > max_items:
            warnings.append(f"{name}: {len(items) - max_items} item(s) beyond {max_items} dropped")
            items = items[:max_items]
        for index, item in enumerate(items):
            if name == "recommended_actions" and isinstance(item, dict) and item.get("statement") is not None:
                action = _typed_action(item["statement"])
                if action is None:
                    warnings.append(f"{name}[{index}]: a typed action that is not a step of the catalogue dropped")
                else:
                    kept[name].append(action)
                continue
            if name == "hypotheses" and isinstance(item, dict) and item.get("statement") is not None:
                hypothesis = _typed_hypothesis(item)
                if hypothesis is None:
                    warnings.append(f"{name}[{index}]: a typed hypothesis that does not fit the contract or cites no ref dropped")
                else:
                    kept[name].append(hypothesis)
                continue
            text = _item_text(item)
            if text is None or not text.strip() or len(text) > max_chars:
                warnings.append(f"{name}[{index}]: unreadable, blank or over-long item dropped")
                continue
            text = " ".join(text.split())
            if name == "hypotheses":
                related = item.get("related_claim_ids") if isinstance(item, dict) else None
                ids = [r for r in related if isinstance(r, str)][:20] if isinstance(related, list) else []
                kept[name].append(Hypothesis(text=text, related_claim_ids=ids))
            elif name == "recommended_actions":
                confirm = item.get("requires_human_confirmation", True) if isinstance(item, dict) else True
                kept[name].append(RecommendedAction(text=text, requires_human_confirmation=confirm is not False))
            else:
                tool = item.get("tool_name", "") if isinstance(item, dict) else ""
                if tool and not is_token(tool):
                    # It reaches the verifier with the item: a token or nothing.
                    warnings.append(f"{name}[{index}].tool_name: not a tool name token; dropped")
                    quoted.append((f"{name}[{index}].tool_name", tool))
                    tool = ""
                kept[name].append(MissingInfo(text=text, tool_name=tool if isinstance(tool, str) else ""))
    return SideLists(kept["hypotheses"], kept["recommended_actions"], kept["missing_info"], warnings, quoted)
