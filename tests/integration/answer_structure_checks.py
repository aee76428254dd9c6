"""What every DiagnoseResponse's structured answer must satisfy, read against
the run's stored invocations: the text is the structure's rendering; the status enum agrees with
the status string; every citation names an invocation of this run (not abandoned) with its tool,
its excerpt is in that invocation's stored evidence (at the cited raw_path, or, for a whole-call
citation, the snapshot's lines are the stored refs' texts); a series window holds at most 60
points, equal to the stored series' points from `first_index`."""

from __future__ import annotations

from attest.gateway.v1 import answer_pb2, gateway_pb2
from shared.core.contracts import ToolInvocation
from shared.core.evidence_view import evidence_view
from shared.core.structured_answer import MAX_SERIES_POINTS, StructuredAnswer, render
from shared.core.tool_results import MetricsResult, parse_path, read_result
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.proto_convert import message_to_model, spec_value


def _flat(text: str) -> str:
    return " ".join(text.split()).lower()


def run_invocations(database_url: str, run_id: str) -> list[ToolInvocation]:
    return InvocationStore(make_session_factory(make_engine(database_url))).list_for_run(run_id)


def structure_problems(response: gateway_pb2.DiagnoseResponse, invocations: list[ToolInvocation]) -> list[str]:
    problems: list[str] = []
    if not response.HasField("structured_answer"):
        return ["the response carries no structured answer"]
    structured = message_to_model(response.structured_answer, StructuredAnswer)
    if render(structured) != response.answer:
        problems.append("the answer text is not the rendering of the structured answer")
    if spec_value(answer_pb2.OutcomeStatus.DESCRIPTOR, response.outcome_status) != response.status:
        problems.append(f"outcome_status does not say status {response.status!r}")
    if not structured.direct_answer:
        problems.append("no direct answer")
    runs = {i.invocation_id: i for i in invocations if not i.abandoned}
    for section in structured.sections:
        for item in section.items:
            for citation in item.citations:
                invocation = runs.get(citation.invocation_id)
                if invocation is None or invocation.tool_name != citation.tool_name:
                    problems.append(f"a citation names {citation.tool_name} #{citation.invocation_id}, not a call of this run")
                    continue
                refs = evidence_view(invocation).refs()
                if citation.raw_path:
                    texts = [ref.text for ref in refs if ref.raw_path == citation.raw_path]
                    head = citation.excerpt.split("…")[0].strip()
                    if not texts or not head or not any(_flat(head) in _flat(t) for t in texts):
                        problems.append(f"the excerpt of {citation.tool_name} #{citation.invocation_id} "
                                        f"{citation.raw_path} is not the stored evidence")
                else:
                    stored = _flat(" ".join(ref.text for ref in refs))
                    for line in citation.excerpt.splitlines():
                        head = line.split("…")[0].strip()
                        if head and not line.startswith("(+") and _flat(head) not in stored:
                            problems.append(f"a snapshot excerpt line of #{citation.invocation_id} is not stored: {line!r}")
                if citation.series is not None:
                    problems += _series_problems(invocation, citation.raw_path, citation.series)
    return problems


def _series_problems(invocation: ToolInvocation, raw_path: str, window) -> list[str]:
    result = read_result(invocation.tool_name, invocation.agent_result)
    if not isinstance(result, MetricsResult):
        return [f"a series window on #{invocation.invocation_id}, which has no stored series"]
    parsed = parse_path(raw_path) if raw_path else ("series", 0, -1, "")
    series = result.series[parsed[1]]
    stored = [[ts, value] for ts, value in series.points[window.first_index:window.first_index + len(window.points)]]
    problems = []
    if len(window.points) > MAX_SERIES_POINTS or not window.points:
        problems.append(f"the series window of #{invocation.invocation_id} has {len(window.points)} points")
    if [[p.timestamp, p.value] for p in window.points] != stored or window.metric != series.metric:
        problems.append(f"the series window of #{invocation.invocation_id} is not the stored series")
    return problems


def sections_of(response: gateway_pb2.DiagnoseResponse) -> list[str]:
    return [spec_value(answer_pb2.SectionKind.DESCRIPTOR, s.kind) or "" for s in response.structured_answer.sections]
