"""Property: the citation self-check checking the output's own parse in place, and handing that
parse to the caller when the text is returned unchanged, returns the text and the
report of the code it replaced, which checked a deep copy and left the caller to parse the text
again. The replaced function is kept below as the oracle (copied). Outputs cite generated stored
calls with right and wrong ids, tools, paths and excerpts, inside Markdown fences or not, and
some are no contract object at all."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.executor.citation_self_check import CheckedText, SelfCheckReport, check_output_text, check_raw_output
from shared.core.contracts import RetrievalDetails, ToolInvocation
from shared.core.tool_results import dump_result, ref_count, rendered_refs
from shared.executor_contract import parse_executor_output
from tests.unit.test_evidence_view_oracle import TOOL_OF, results

RUN = "run-self-check"

# --- oracle: the replaced code ---------------------------------------------------------------------


def oracle_check_output_text(text: str, invocations: list[ToolInvocation], run_id: str | None) -> CheckedText:
    parsed = parse_executor_output(text)
    if parsed.parse_status != "valid" or parsed.raw is None:
        return CheckedText(text, SelfCheckReport())
    raw = copy.deepcopy(parsed.raw)
    report = check_raw_output(raw, invocations, run_id)
    if not report.changed:
        return CheckedText(text, report)
    return CheckedText(json.dumps(raw, ensure_ascii=False), report)


# --- inputs --------------------------------------------------------------------------------------


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, list[ToolInvocation]]:
    invocations: list[ToolInvocation] = []
    texts: dict[int, list[tuple[str, str]]] = {}
    for invocation_id in range(1, draw(st.integers(1, 3)) + 1):
        result = draw(results)
        tool = TOOL_OF[type(result)]
        invocations.append(ToolInvocation(
            invocation_id=invocation_id, run_id=draw(st.sampled_from([RUN, RUN, "other-run"])), tool_name=tool,
            lifecycle=draw(st.sampled_from(["READY", "READY", "ERROR"])), evidence_status="EVIDENCE_FOUND",
            agent_result=dump_result(result),
            retrieval_details=RetrievalDetails(source="estate-sql:x", refs_rendered=True, ref_count=ref_count(result)),
        ))
        texts[invocation_id] = [(r.raw_path, r.text) for r in rendered_refs(result)] or [("summary", "")]
    claims = []
    for k in range(draw(st.integers(0, 3))):
        bindings: list[Any] = []
        for _ in range(draw(st.integers(0, 3))):
            cited = draw(st.integers(0, len(invocations) + 1))
            path, text = draw(st.sampled_from(texts.get(cited, [("hits[0]", "x")])))
            start = draw(st.integers(0, len(text)))
            binding = {
                "source_type": "logs", "tool_name": draw(st.sampled_from([
                    invocations[cited - 1].tool_name if 0 < cited <= len(invocations) else "query_logs", "query_logs", ""])),
                "source_invocation_id": cited, "source_invocation_ids": draw(st.sampled_from([[cited], [], [cited, 99]])),
                "raw_path": draw(st.sampled_from([path, path, " " + path, "", "nowhere[0]"])),
                "evidence_excerpt": draw(st.sampled_from([text[start:start + 40], text, "not in the ref at all", ""])),
            }
            if draw(st.booleans()):
                del binding[draw(st.sampled_from(list(binding)))]
            bindings.append(binding if draw(st.integers(0, 9)) else "not a binding")
        claims.append({"claim_id": f"c{k}", "claim_type": "observation", "claim_text": "t",
                       "support_level": "direct", "evidence_bindings": bindings})
    body = json.dumps({"answer_version": "executor_evidence_v2", "claims": claims, "hypotheses": [],
                       "recommended_actions": [], "missing_info": []}, ensure_ascii=False)
    text = draw(st.sampled_from([body, f"```json\n{body}\n```", body[:-1], "", "not json", "[1]"]))
    return text, invocations


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.sampled_from([RUN, None]))
def test_the_checked_text_and_report_are_the_replaced_codes(case: tuple[str, list[ToolInvocation]],
                                                            run_id: str | None) -> None:
    text, invocations = case
    checked = check_output_text(text, invocations, run_id)
    expected = oracle_check_output_text(text, invocations, run_id)
    assert (checked.text, checked.report) == (expected.text, expected.report)
    if checked.parsed is not None:
        assert checked.text == text
        assert checked.parsed == parse_executor_output(text)
