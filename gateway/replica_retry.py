"""The one retry of an executor call whose replica was lost.

Several executor replicas serve one round-robin channel. When the replica running a call dies
(SIGKILL, a node lost), the call fails UNAVAILABLE; the executor never answers UNAVAILABLE itself
(its refusals are INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, RESOURCE_EXHAUSTED), so that
code means the work may be redone elsewhere. While the diagnosis is still active and its deadline
has time left, the call is made once more as attempt 1 of the same (run, round): the executor
then marks the lost attempt's invocations abandoned (kept for the audit, never cited or counted)
before any tool of the retry runs. The orchestration log records `REPLICA_LOST` before the retry.
A second failure, or any other, is raised as before: the run ends as on any executor failure.

A call that found no replica at all (the only one restarting, say) fails UNAVAILABLE at once, with
nothing written; its retry first waits up to RECONNECT_WAIT_SECONDS (within the deadline) for the
channel to connect, so a replica back within that time answers the retry.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from gateway import progress_events as events
from gateway.audit import RunAudit
from gateway.clients import Deadline, DownstreamCall, DownstreamFailed, RequestT, ResponseT
from shared.channels import wait_connected

REPLICA_LOST = "REPLICA_LOST"
RETRY_ATTEMPT = 1
RECONNECT_WAIT_SECONDS = 2.0


def with_replica_retry(call: DownstreamCall, audit: RunAudit, method: grpc.UnaryUnaryMultiCallable[RequestT, ResponseT],
                       request_for: Callable[[int], RequestT], deadline: Deadline, is_active: Callable[[], bool],
                       round_: int | None = None, channel: grpc.Channel | None = None) -> ResponseT:
    """`method` called with `request_for(0)`; if its replica was lost, once more with
    `request_for(1)`, after up to RECONNECT_WAIT_SECONDS for `channel` (the method's) to connect."""
    try:
        return call("executor", method, request_for(0), deadline, is_active)
    except DownstreamFailed as exc:
        if exc.code != grpc.StatusCode.UNAVAILABLE or not is_active() or deadline.expired():
            raise
        lost = exc.detail
    audit.event("executor", "INFO", REPLICA_LOST,
                f"the executor replica was lost (UNAVAILABLE: {lost[:200]}); attempt {RETRY_ATTEMPT} follows "
                "on another replica, the lost attempt's invocations are abandoned",
                typed=events.replica_lost(RETRY_ATTEMPT), kind="tool_call", round_=round_,
                payload={"attempt": RETRY_ATTEMPT})
    audit.flush_events()  # a gateway lost during the retry still shows why it was made
    if channel is not None:
        wait_connected(channel, min(RECONNECT_WAIT_SECONDS, deadline.remaining()))
    return call("executor", method, request_for(RETRY_ATTEMPT), deadline, is_active)
