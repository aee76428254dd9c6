"""Server interceptors for the concerns every service shares: error → status mapping and auth
(bearer tokens naming principals).

Both wrap the handler's behaviour rather than replacing the handler, so they work for unary and
streaming methods alike and keep the method's (de)serializers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeAlias

import grpc

from shared import errors
from shared.error_details import abort_with_details
from shared.principals import DEFAULT_PRINCIPAL, PrincipalTokens, principal_context

_log = logging.getLogger(__name__)

# Domain errors whose message is meant for the caller; order matters only for subclasses.
_STATUS_BY_ERROR: tuple[tuple[type[errors.AttestError], grpc.StatusCode], ...] = (
    (errors.InvalidInput, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.NotFound, grpc.StatusCode.NOT_FOUND),
    (errors.Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (errors.FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (errors.ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.Aborted, grpc.StatusCode.ABORTED),
    (errors.Unavailable, grpc.StatusCode.UNAVAILABLE),
)
INTERNAL_ERROR_DETAILS = "internal error"

Behavior = Callable[[Any, grpc.ServicerContext], Any]
# The interceptors serve every method, whatever its message types. (Generic in the stubs only:
# the alias is a string so that nothing subscripts grpc's class at run time.)
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


def _rewrap(
    handler: Handler,
    wrap_unary_response: Callable[[Behavior], Behavior],
    wrap_stream_response: Callable[[Behavior], Behavior],
    *,
    tolerant_requests: bool = False,
) -> Handler:
    """Rebuild `handler` with its behaviour wrapped, keeping its kind and (de)serializers; with
    `tolerant_requests`, a single request that does not decode reaches the behaviour as an
    `_UndecodableRequest` instead of failing in grpc."""
    request_deserializer = handler.request_deserializer
    if tolerant_requests and request_deserializer is not None and not handler.request_streaming:
        request_deserializer = _tolerant(request_deserializer)
    kwargs = {
        "request_deserializer": request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            wrap_unary_response(handler.unary_unary), **kwargs
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            wrap_stream_response(handler.unary_stream), **kwargs
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            wrap_unary_response(handler.stream_unary), **kwargs
        )
    if handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(
            wrap_stream_response(handler.stream_stream), **kwargs
        )
    return handler


class _UndecodableRequest:
    """Stands in for a request whose bytes are not a valid message (e.g. invalid UTF-8 in a
    string field), so that the caller gets INVALID_ARGUMENT instead of grpc's own INTERNAL
    "Exception deserializing request!"."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _tolerant(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError or ValueError
            return _UndecodableRequest(type(exc).__name__)

    return deserialize


def _already_aborted(context: grpc.ServicerContext) -> bool:
    """True when the exception came from `context.abort()`: the status is already chosen."""
    code_of = getattr(context, "code", None)
    if code_of is None:
        return False
    try:
        code = code_of()
    except (RuntimeError, NotImplementedError):
        return False
    return code is not None and code != grpc.StatusCode.OK


def checked_before_reading(handler: Handler, check: Callable[[grpc.ServicerContext], None]) -> Handler:
    """A unary-request `handler` declared as reading a request stream, whose behaviour runs
    `check(context)` before it reads the one request: a sync server reads a unary request on a
    worker before any handler code runs, so a caller refused by `check` that sends headers and
    never a body would otherwise hold that worker. A request that does not decode is
    INVALID_ARGUMENT, as for any other method. Request-streaming handlers are returned as they are
    (their behaviour runs before any request is read)."""
    deserializer = _tolerant(handler.request_deserializer) if handler.request_deserializer else None
    kwargs = {"request_deserializer": deserializer, "response_serializer": handler.response_serializer}
    if handler.unary_unary is not None:
        inner_unary = handler.unary_unary

        def unary(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
            check(context)
            return inner_unary(_single_request(requests), context)

        return grpc.stream_unary_rpc_method_handler(unary, **kwargs)
    if handler.unary_stream is not None:
        inner_stream = handler.unary_stream

        def stream(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            check(context)
            yield from inner_stream(_single_request(requests), context)

        return grpc.stream_stream_rpc_method_handler(stream, **kwargs)
    return handler


def _single_request(requests: Iterator[Any]) -> Any:
    for request in requests:
        _reject_undecodable(request)
        return request
    raise errors.InvalidInput("the call ended without a request message", reason=errors.Reason.MALFORMED_REQUEST)


class ErrorMappingInterceptor(grpc.ServerInterceptor):
    """Turns exceptions escaping a handler into a status: domain errors keep their message,
    anything else becomes INTERNAL with a short message and is logged with its traceback."""

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Handler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method

        def unary(behavior: Behavior) -> Behavior:
            def mapped(request: Any, context: grpc.ServicerContext) -> Any:
                try:
                    _reject_undecodable(request)
                    return behavior(request, context)
                except errors.Cancelled as exc:
                    _cancelled(exc, context, method)
                except Exception as exc:  # noqa: BLE001 - the point is to catch everything
                    self._abort(exc, context, method)

            return mapped

        def stream(behavior: Behavior) -> Behavior:
            def mapped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                try:
                    _reject_undecodable(request)
                    yield from behavior(request, context)
                except errors.Cancelled as exc:
                    _cancelled(exc, context, method)
                except Exception as exc:  # noqa: BLE001
                    self._abort(exc, context, method)

            return mapped

        return _rewrap(handler, unary, stream, tolerant_requests=True)

    @staticmethod
    def _abort(exc: Exception, context: grpc.ServicerContext, method: str) -> None:
        if _already_aborted(context):
            raise exc
        code = next((c for error_type, c in _STATUS_BY_ERROR if isinstance(exc, error_type)), None)
        if isinstance(exc, errors.AttestError) and code is not None:
            _log.info("%s rejected: %s %s: %s", method, code.name, exc.reason, exc)
            retry_after = exc.retry_after_seconds if isinstance(exc, errors.ResourceExhausted) else None
            abort_with_details(context, code, str(exc), exc.reason, field=exc.field, metadata=exc.metadata,
                               retry_after_seconds=retry_after)
        else:
            _log.error("unhandled error in %s", method, exc_info=exc)
            # The exception text may carry internals (SQL, paths, evidence): it stays in the log.
            abort_with_details(context, grpc.StatusCode.INTERNAL, INTERNAL_ERROR_DETAILS, errors.Reason.INTERNAL)


def _cancelled(exc: errors.Cancelled, context: grpc.ServicerContext, method: str) -> None:
    """The caller went away: CANCELLED (it no longer listens; the status is for logs and tests)."""
    _log.info("%s cancelled by the caller: %s", method, exc or "no reason given")
    abort_with_details(context, grpc.StatusCode.CANCELLED, str(exc) or f"{method} cancelled by the caller",
                       errors.Reason.CANCELLED)


def _reject_undecodable(request: Any) -> None:
    if isinstance(request, _UndecodableRequest):
        raise errors.InvalidInput(f"the request is not a valid protobuf message ({request.reason})",
                                  reason=errors.Reason.MALFORMED_REQUEST)


DEFAULT_AUTH_EXEMPT_PREFIXES: tuple[str, ...] = ("/grpc.health.v1.", "/grpc.reflection.")


class BearerAuthInterceptor(grpc.ServerInterceptor):
    """Requires `authorization: Bearer <token>` on every call except health and reflection, and
    runs the handler as the token's principal (`shared.principals.current_principal()`).

    `tokens` is a `PrincipalTokens` (several named principals), or one token for the principal
    `default`. With None or an empty token every call is let through as `default` (local
    development).
    """

    def __init__(
        self,
        tokens: PrincipalTokens | str | None,
        exempt_prefixes: Sequence[str] = DEFAULT_AUTH_EXEMPT_PREFIXES,
    ) -> None:
        self._tokens = PrincipalTokens.single(tokens) if isinstance(tokens, str) and tokens else (
            tokens if isinstance(tokens, PrincipalTokens) else None)
        self._exempt_prefixes = tuple(exempt_prefixes)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Handler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(self._exempt_prefixes):
            return handler
        principal = DEFAULT_PRINCIPAL if self._tokens is None else self._principal(
            handler_call_details.invocation_metadata)
        if principal is None:
            return _refusal(handler)
        return _rewrap(handler, _as_principal_unary(principal), _as_principal_stream(principal))

    def _principal(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
        assert self._tokens is not None
        presented = b""
        for key, value in metadata or ():
            if key == "authorization":
                presented = value if isinstance(value, bytes) else value.encode()
                break
        scheme, _, credential = presented.partition(b" ")
        # The scheme is case-insensitive (RFC 7235); the credential is compared in constant time.
        if scheme.lower() != b"bearer" or not credential:
            return None
        return self._tokens.principal_for(credential)


def _deny(_request: Any, context: grpc.ServicerContext) -> Any:
    # No token, a wrong scheme or an unknown token: one answer, and nothing of the token in it.
    abort_with_details(context, grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token",
                       errors.Reason.UNAUTHENTICATED, metadata={"scheme": "Bearer"})


def _deny_stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
    _deny(request, context)
    yield from ()


def _refusal(handler: Handler) -> Handler:
    """The refusal of an unauthenticated call, declared as reading a request stream so that the
    server never waits for a request body: a unary method's worker reads its request before any
    handler code runs, and a caller that sends headers and never a body would hold that worker."""
    kwargs = {"request_deserializer": handler.request_deserializer,
              "response_serializer": handler.response_serializer}
    if handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(_deny_stream, **kwargs)
    return grpc.stream_unary_rpc_method_handler(_deny, **kwargs)


def _as_principal_unary(principal: str) -> Callable[[Behavior], Behavior]:
    def wrap(behavior: Behavior) -> Behavior:
        def acting(request: Any, context: grpc.ServicerContext) -> Any:
            return principal_context(principal).run(behavior, request, context)

        return acting

    return wrap


def _as_principal_stream(principal: str) -> Callable[[Behavior], Behavior]:
    def wrap(behavior: Behavior) -> Behavior:
        def acting(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            # Each step of the handler's generator runs in the principal's context.
            scope = principal_context(principal)
            responses = scope.run(behavior, request, context)
            try:
                while True:
                    try:
                        response = scope.run(next, responses)
                    except StopIteration:
                        return
                    yield response
            finally:
                close = getattr(responses, "close", None)
                if close is not None:  # an abandoned stream: the handler's own cleanup, as the principal
                    scope.run(close)

        return acting

    return wrap
