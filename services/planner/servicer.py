"""PlannerService: proto in -> plan -> proto out."""

from __future__ import annotations

from datetime import datetime, timezone

import grpc

from attest.common.v1 import audit_pb2, enums_pb2, evidence_pb2
from attest.planner.v1 import planner_pb2, planner_pb2_grpc
from services.planner.embedded_planner import EmbeddedPlanner
from shared.contracts import RetryContext
from shared.errors import InvalidInput
from shared.proto_convert import message_to_model, plain_to_message, spec_value

PROMPT = audit_pb2.PromptRef(role="planner", name="planner.embedded", version="1")


def _parse_now(text: str) -> datetime:
    if not text:
        return datetime.now(timezone.utc)
    try:
        now = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidInput(f"now is not an ISO-8601 timestamp: {text[:40]!r}") from exc
    return now if now.tzinfo else now.replace(tzinfo=timezone.utc)


class PlannerServicer(planner_pb2_grpc.PlannerServiceServicer):
    def __init__(self, planner: EmbeddedPlanner) -> None:
        self._planner = planner

    def CreatePlan(self, request: planner_pb2.CreatePlanRequest, context: grpc.ServicerContext):
        if not request.query.strip():
            raise InvalidInput("query is empty")
        mode = spec_value(enums_pb2.PlannerMode.DESCRIPTOR, request.mode) or "NORMAL"
        retry_context = (
            message_to_model(request.retry_context, RetryContext)
            if request.HasField("retry_context")
            else None
        )
        if mode == "EVIDENCE_GAP_ONLY" and retry_context is None:
            raise InvalidInput("EVIDENCE_GAP_ONLY planning needs a retry_context")
        plan = self._planner.plan(request.query, _parse_now(request.now), mode, retry_context)
        return planner_pb2.CreatePlanResponse(
            plan=plain_to_message(plan, evidence_pb2.Plan),
            prompt=PROMPT,
            model_call=audit_pb2.ModelCallInfo(role="planner", provider="embedded", model="planner.embedded", attempts=1),
        )
