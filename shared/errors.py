"""Domain errors with a meaning callers can act on.

Domain code raises these without knowing about gRPC; `shared.interceptors.ErrorMappingInterceptor`
turns them into the matching status code with the exception's message as details, and a
`google.rpc.Status` in the `grpc-status-details-bin` trailer (`shared.error_details`): an
`ErrorInfo` with the error's `reason` in `ERROR_DOMAIN`, a `BadRequest` naming the request `field`
of an INVALID_ARGUMENT, a `RetryInfo` when waiting helps. Any other exception is a bug and becomes
INTERNAL without its text.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

# The `ErrorInfo.domain` of every error an Attest service returns.
ERROR_DOMAIN = "attest.dev"


class Reason(StrEnum):
    """Every `ErrorInfo.reason` Attest returns, one per kind of error. They are
    part of the contract: clients branch on them, so a value is never renamed or reused. The
    README's "Error reasons" table says the status code, when and whether a retry can help."""

    # INVALID_ARGUMENT: the request, as sent (a BadRequest names the field)
    QUERY_EMPTY = "QUERY_EMPTY"
    QUERY_TOO_LONG = "QUERY_TOO_LONG"
    IDENTIFIER_TOO_LONG = "IDENTIFIER_TOO_LONG"
    HIDDEN_CHARACTER = "HIDDEN_CHARACTER"
    UNKNOWN_ENUM_VALUE = "UNKNOWN_ENUM_VALUE"
    FIELD_REQUIRED = "FIELD_REQUIRED"
    VALUE_OUT_OF_RANGE = "VALUE_OUT_OF_RANGE"
    INVALID_PAGE_SIZE = "INVALID_PAGE_SIZE"
    INVALID_PAGE_TOKEN = "INVALID_PAGE_TOKEN"
    PAGING_NEEDS_FULL_VIEW = "PAGING_NEEDS_FULL_VIEW"
    INVALID_TIMESTAMP = "INVALID_TIMESTAMP"
    MALFORMED_REQUEST = "MALFORMED_REQUEST"
    # INVALID_ARGUMENT: a plan past the executor's limits, or a role's input past its bounds
    PLAN_TOO_LONG = "PLAN_TOO_LONG"
    PLAN_TOO_MANY_SERVICES = "PLAN_TOO_MANY_SERVICES"
    TOOL_NAME_TOO_LONG = "TOOL_NAME_TOO_LONG"
    TOOL_ARGUMENT_TOO_LARGE = "TOOL_ARGUMENT_TOO_LARGE"
    TOOL_REQUEST_TOO_LARGE = "TOOL_REQUEST_TOO_LARGE"
    RESULT_LIMIT_TOO_HIGH = "RESULT_LIMIT_TOO_HIGH"
    QUERY_WINDOW_REVERSED = "QUERY_WINDOW_REVERSED"
    QUERY_WINDOW_TOO_WIDE = "QUERY_WINDOW_TOO_WIDE"
    TOO_MANY_ITEMS = "TOO_MANY_ITEMS"
    TEXT_TOO_LONG = "TEXT_TOO_LONG"
    REQUEST_ID_REUSED = "REQUEST_ID_REUSED"
    # NOT_FOUND: unknown, or the caller's own is not it (the same answer either way)
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    RUN_NOT_FOUND = "RUN_NOT_FOUND"
    # FAILED_PRECONDITION: the run's state forbids the write
    RUN_FINISHED = "RUN_FINISHED"
    RUN_NOT_WRITABLE = "RUN_NOT_WRITABLE"
    ATTEMPT_SUPERSEDED = "ATTEMPT_SUPERSEDED"
    INVOCATION_NOT_WRITABLE = "INVOCATION_NOT_WRITABLE"
    REQUEST_ID_RUN_GONE = "REQUEST_ID_RUN_GONE"
    REQUEST_ID_RUN_PENDING = "REQUEST_ID_RUN_PENDING"
    # ABORTED: the request_id names a run still running (metadata run_id: follow it with GetRun)
    REQUEST_ID_RUN_RUNNING = "REQUEST_ID_RUN_RUNNING"
    # UNAVAILABLE: the gateway cannot take the diagnosis now
    AUDIT_STORE_UNWRITABLE = "AUDIT_STORE_UNWRITABLE"
    GATEWAY_STOPPING = "GATEWAY_STOPPING"
    # RESOURCE_EXHAUSTED
    QUOTA_RUNS_IN_FLIGHT = "QUOTA_RUNS_IN_FLIGHT"
    QUOTA_RUNS_PER_MINUTE = "QUOTA_RUNS_PER_MINUTE"
    RUN_INVOCATION_BUDGET = "RUN_INVOCATION_BUDGET"
    RUN_EVIDENCE_BUDGET = "RUN_EVIDENCE_BUDGET"
    # who is calling
    UNAUTHENTICATED = "UNAUTHENTICATED"
    CALLER_NOT_ALLOWED = "CALLER_NOT_ALLOWED"
    # the call itself
    CANCELLED = "CANCELLED"
    INTERNAL = "INTERNAL"


class AttestError(Exception):
    """Base of the errors whose message is safe to show to the caller.

    `reason` is the error's kind (the class's own when not given); `field` the request field at
    fault, as a path (`query`, `plan.steps[2].arguments.limit`); `metadata` short non-secret values
    a client can act on (a limit, a setting's name), never a token or more user text than needed."""

    default_reason = Reason.INTERNAL

    def __init__(self, message: str, *, reason: Reason | None = None, field: str | None = None,
                 metadata: Mapping[str, str | int] | None = None) -> None:
        super().__init__(message)
        self.reason = reason or self.default_reason
        self.field = field
        self.metadata = {key: str(value) for key, value in (metadata or {}).items()}


class InvalidInput(AttestError):
    """The request is malformed or out of bounds (INVALID_ARGUMENT)."""

    default_reason = Reason.MALFORMED_REQUEST


class NotFound(AttestError):
    """The addressed run, session or invocation does not exist (NOT_FOUND)."""

    default_reason = Reason.RUN_NOT_FOUND


class Unauthenticated(AttestError):
    """The caller did not prove who it is (UNAUTHENTICATED)."""

    default_reason = Reason.UNAUTHENTICATED


class FailedPrecondition(AttestError):
    """The system is not in a state that allows the operation (FAILED_PRECONDITION)."""

    default_reason = Reason.RUN_NOT_WRITABLE


class Aborted(AttestError):
    """The operation conflicts with one in progress; the metadata says how to follow it (ABORTED)."""

    default_reason = Reason.REQUEST_ID_RUN_RUNNING


class Unavailable(AttestError):
    """The service cannot do the work now; another replica or a later try may (UNAVAILABLE)."""

    default_reason = Reason.AUDIT_STORE_UNWRITABLE


class PermissionDenied(AttestError):
    """The caller is known but may not call this (PERMISSION_DENIED)."""

    default_reason = Reason.CALLER_NOT_ALLOWED


class ResourceExhausted(AttestError):
    """A limit or quota is used up (RESOURCE_EXHAUSTED). With `retry_after_seconds` the status
    carries a `google.rpc.RetryInfo` saying when trying again may succeed."""

    default_reason = Reason.RUN_INVOCATION_BUDGET

    def __init__(self, message: str, retry_after_seconds: float | None = None, *, reason: Reason | None = None,
                 metadata: Mapping[str, str | int] | None = None) -> None:
        super().__init__(message, reason=reason, metadata=metadata)
        self.retry_after_seconds = retry_after_seconds


class Cancelled(BaseException):
    """The caller went away: the work is abandoned (the one cancellation type).

    A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way up can
    swallow it and carry on with work nobody waits for; the ErrorMappingInterceptor maps it to
    CANCELLED, logged at INFO, for every service."""
