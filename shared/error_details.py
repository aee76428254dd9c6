"""Rich error details: the `google.rpc.Status` every Attest error carries in
its `grpc-status-details-bin` trailer, and how a Python frontend reads it back.

The status holds an `ErrorInfo` (a stable `reason` from `shared.errors.Reason`, the domain
`attest.dev`, metadata such as the field or the limit), a `BadRequest` with one field violation
for an INVALID_ARGUMENT caused by a request field, and a `RetryInfo` only where waiting helps (the
per-caller quotas). The status message is the error's human-readable text, unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn, TypedDict

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from shared.errors import ERROR_DOMAIN, Reason


def rich_status(code: grpc.StatusCode, message: str, reason: Reason, *, field: str | None = None,
                metadata: Mapping[str, str] | None = None,
                retry_after_seconds: float | None = None) -> grpc.Status:
    """A status for `context.abort_with_status` whose details are ErrorInfo, then BadRequest
    (INVALID_ARGUMENT with a `field`), then RetryInfo (with `retry_after_seconds`)."""
    info_metadata = dict(metadata or {})
    if field:
        info_metadata.setdefault("field", field)
    details: list[Message] = [error_details_pb2.ErrorInfo(reason=reason.value, domain=ERROR_DOMAIN,
                                                         metadata=info_metadata)]
    if field and code == grpc.StatusCode.INVALID_ARGUMENT:
        violation = error_details_pb2.BadRequest.FieldViolation(field=field, description=message,
                                                                reason=reason.value)
        details.append(error_details_pb2.BadRequest(field_violations=[violation]))
    if retry_after_seconds is not None:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(max(0, round(retry_after_seconds * 1e9)))
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    packed = []
    for detail in details:
        wrapped = any_pb2.Any()
        wrapped.Pack(detail)
        packed.append(wrapped)
    return rpc_status.to_status(status_pb2.Status(code=code.value[0], message=message, details=packed))


def abort_with_details(context: grpc.ServicerContext, code: grpc.StatusCode, message: str, reason: Reason, *,
                       field: str | None = None, metadata: Mapping[str, str] | None = None,
                       retry_after_seconds: float | None = None) -> NoReturn:
    """End the call with `rich_status(...)`. What `context.abort_with_status` does, in the two calls
    the OpenTelemetry server wrapper records: it sees `abort` (the span's error status and
    `rpc.grpc.status_code`) but passes `abort_with_status` through unrecorded."""
    status = rich_status(code, message, reason, field=field, metadata=metadata,
                         retry_after_seconds=retry_after_seconds)
    context.set_trailing_metadata(status.trailing_metadata)
    context.abort(status.code, status.details)


class FieldViolation(TypedDict):
    field: str
    description: str


class ErrorDetails(TypedDict, total=False):
    """What `error_details` found; a key is absent when the status did not carry it."""

    reason: str
    domain: str
    metadata: dict[str, str]
    field_violations: list[FieldViolation]
    retry_after_seconds: float


def error_details(error: grpc.RpcError) -> ErrorDetails:
    """The details of a failed call (`grpc.RpcError` from a stub) as a plain dict: `reason`,
    `domain`, `metadata`, `field_violations`, `retry_after_seconds`. Empty when the status carries
    none (a gateway that could not be reached, a deadline the client's own channel enforced)."""
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]  # a failed call is a grpc.Call
    except (AttributeError, ValueError):  # not a call's error, or trailers that contradict the status
        return {}
    found: ErrorDetails = {}
    for detail in status.details if status is not None else ():
        info: Any
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            found["reason"], found["domain"], found["metadata"] = info.reason, info.domain, dict(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            info = error_details_pb2.BadRequest()
            detail.Unpack(info)
            found["field_violations"] = [FieldViolation(field=v.field, description=v.description)
                                         for v in info.field_violations]
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            found["retry_after_seconds"] = info.retry_delay.ToNanoseconds() / 1e9
    return found


def describe(error: grpc.RpcError) -> str:
    """One line for a person: `CODE: details [REASON, field F, retry in N s]`."""
    code = error.code()
    line = f"{code.name if code else 'UNKNOWN'}: {error.details()}"
    found = error_details(error)
    notes = [found["reason"]] if "reason" in found else []
    fields = [v["field"] for v in found.get("field_violations", [])]
    if fields:
        notes.append("field " + ", ".join(fields))
    if "retry_after_seconds" in found:
        notes.append(f"retry in {found['retry_after_seconds']:g} s")
    return line + (f" [{'; '.join(notes)}]" if notes else "")
