"""Domain errors with a meaning callers can act on.

Domain code raises these without knowing about gRPC; `shared.interceptors.ErrorMappingInterceptor`
turns them into the matching status code with the exception's message as details. Any other
exception is a bug and becomes INTERNAL without its text.
"""


class AttestError(Exception):
    """Base of the errors whose message is safe to show to the caller."""


class InvalidInput(AttestError):
    """The request is malformed or out of bounds (INVALID_ARGUMENT)."""


class NotFound(AttestError):
    """The addressed run, session or invocation does not exist (NOT_FOUND)."""


class Unauthenticated(AttestError):
    """The caller did not prove who it is (UNAUTHENTICATED)."""


class FailedPrecondition(AttestError):
    """The system is not in a state that allows the operation (FAILED_PRECONDITION)."""


class PermissionDenied(AttestError):
    """The caller is known but may not call this (PERMISSION_DENIED)."""


class ResourceExhausted(AttestError):
    """A limit or quota is used up (RESOURCE_EXHAUSTED). With `retry_after_seconds` the status
    carries a `google.rpc.RetryInfo` saying when trying again may succeed."""

    def __init__(self, message: str, retry_after_seconds: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class Cancelled(BaseException):
    """The caller went away: the work is abandoned (issue 18, point 3: the one cancellation type).

    A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way up can
    swallow it and carry on with work nobody waits for; the ErrorMappingInterceptor maps it to
    CANCELLED, logged at INFO, for every service."""
