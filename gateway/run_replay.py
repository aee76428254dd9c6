"""Idempotent Diagnose: a request whose request_id already names a run of the
same principal gets that run's result instead of a new run.

- The same id with another query, mode or session is INVALID_ARGUMENT (`check_same_request`).
- A run still RUNNING is never waited for: the servicer answers ABORTED at once with the run id
  (the client follows it with GetRun); a run that ended CANCELLED frees its id, and the request
  starts a new run with it. A run whose gateway died is ended RUN_INTERRUPTED by the reaper
  (gateway/run_reaper.py), and its id then replays that outcome.
- A finished run's DiagnoseResponse is rebuilt from its row (`response_from_run`): the answer the
  user saw (stored after the time-zone step), the run's verdict, fallback type, status and trace
  id, and from `verifier_evaluation` the model verdict, ceiling, groundedness, rounds and (single-
  ReAct) the release outcome.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import answer_pb2, gateway_pb2
from shared.core.structured_answer import StructuredAnswer
from shared.db.run_store import stored_time
from shared.errors import InvalidInput, Reason
from shared.proto_convert import enum_member, plain_to_message


def claim_is_live(run: dict[str, Any], since: datetime) -> bool:
    """Whether the run still holds its request id: not cancelled, and within the retention window."""
    return run["status"] != "CANCELLED" and stored_time(run["created_at"]) >= since


def check_same_request(run: dict[str, Any], request_id: str, query: str, mode: str, session_id: str) -> None:
    """INVALID_ARGUMENT unless the request repeats the one that started `run`."""
    differs = [name for name, same in (("query", run["query"] == query), ("mode", run["mode"] == mode),
                                       ("session_id", not session_id or run["session_id"] == session_id))
               if not same]
    if differs:
        raise InvalidInput(f"request_id {request_id[:40]!r} was already used for another request (its "
                           f"{', '.join(differs)} differ); send a new request_id for a new question",
                           reason=Reason.REQUEST_ID_REUSED, field="request_id")


def _verdict(value: Any) -> enums_pb2.Verdict:
    return enum_member(enums_pb2.Verdict, value if isinstance(value, str) else None)


def response_from_run(run: dict[str, Any]) -> gateway_pb2.DiagnoseResponse:
    """The DiagnoseResponse of a finished run, rebuilt from its row and verifier_evaluation."""
    evaluation = (run.get("self_evaluation") or {}).get("verifier_evaluation") or {}
    react = evaluation.get("single_react") or {}
    fallback_type = run["fallback_type"]
    release = react.get("release_outcome") or ("FALLBACK" if fallback_type else "SUCCESS")
    score = evaluation.get("groundedness_score")
    rounds = evaluation.get("rounds")
    return gateway_pb2.DiagnoseResponse(
        run_id=run["run_id"],
        session_id=run["session_id"],
        answer=run["answer"] or "",
        effective_verdict=_verdict(run["effective_verdict"]),
        model_verdict=_verdict(evaluation.get("model_verdict") if run["effective_verdict"] else None),
        verdict_ceiling=_verdict(evaluation.get("verdict_ceiling")),
        groundedness_score=float(score) if isinstance(score, int | float) and run["effective_verdict"] else 0.0,
        fallback_type=enum_member(enums_pb2.FallbackType, fallback_type),
        release_outcome=enum_member(enums_pb2.ReleaseOutcome, release),
        trace_id=run["trace_id"] or "",
        rounds=int(rounds) if isinstance(rounds, int) else 0,
        status=run["status"],
        outcome_status=enum_member(answer_pb2.OutcomeStatus, run["status"]),
        **_answer(run),
    )


def _answer(run: dict[str, Any]) -> dict[str, Any]:
    """The structured answer and retryable as the run released them (self_evaluation `answer`)."""
    stored = (run.get("self_evaluation") or {}).get("answer") or {}
    if not stored.get("structured_answer"):
        return {}
    structured = StructuredAnswer.model_validate(stored["structured_answer"])
    return {"structured_answer": plain_to_message(structured, answer_pb2.StructuredAnswer),
            "retryable": bool(stored.get("retryable"))}


def retention_start(now: datetime, hours: float) -> datetime:
    return now - timedelta(hours=hours)
