"""Who is calling: the Attest identity in the peer's TLS certificate, and who may call a role.

grpcio fills `context.auth_context()` from the verified client certificate. Its `peer_uri` key
holds the certificate's URI SANs only (`x509_subject_alternative_name` mixes DNS names, IPs and
URIs), so an identity is read from there: `spiffe://attest/<name>` → `<name>`
(tests/grpc/test_mutual_tls.py shows the keys against a real server).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeAlias

import grpc

from shared import errors
from shared.interceptors import checked_before_reading
from shared.tls import identity_from_uri

_log = logging.getLogger(__name__)

# Any method's handler (generic in the stubs only, hence the string).
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
PEER_URI_KEY = "peer_uri"
# Services any authenticated peer may call: probes, operators' grpcurl, the launcher's wait.
OPEN_SERVICES: tuple[str, ...] = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
                                  "grpc.reflection.v1.ServerReflection")


def peer_identities(context: grpc.ServicerContext) -> list[str]:
    """The Attest identities in the caller's verified certificate (empty without TLS)."""
    raw: bytes | Sequence[bytes] = context.auth_context().get(PEER_URI_KEY, [])
    values: Sequence[bytes] = [raw] if isinstance(raw, bytes) else raw
    names = (identity_from_uri(value.decode("utf-8", "replace")) for value in values)
    return [name for name in names if name is not None]


def _service_of(method: str) -> str:
    """`/pkg.Service/Method` → `pkg.Service`."""
    return method.lstrip("/").split("/", 1)[0]


class CallerIdentityInterceptor(grpc.ServerInterceptor):
    """Lets through only calls whose peer certificate names an allowed identity; the health and
    reflection services stay open to every peer that passed the TLS handshake."""

    def __init__(self, service_name: str, allowed: Collection[str],
                 open_services: Collection[str] = OPEN_SERVICES) -> None:
        self._service_name = service_name
        self._allowed = frozenset(allowed)
        self._open = frozenset(open_services)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Handler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = continuation(handler_call_details)
        if handler is None or _service_of(handler_call_details.method) in self._open:
            return handler
        return _checked(handler, self._check, handler_call_details.method)

    def _check(self, context: grpc.ServicerContext, method: str) -> None:
        callers = peer_identities(context)
        if any(name in self._allowed for name in callers):
            return
        shown = ", ".join(callers) if callers else "a peer without an Attest identity"
        _log.warning("refused %s from %s (%s): not an allowed caller", method, context.peer(), shown)
        # Mapped to PERMISSION_DENIED by the ErrorMappingInterceptor, which runs outside this one.
        raise errors.PermissionDenied(
            f"{shown} may not call the {self._service_name}; allowed callers: {', '.join(sorted(self._allowed))}",
            reason=errors.Reason.CALLER_NOT_ALLOWED, metadata={"service": self._service_name},
        )


def _checked(handler: Handler, check: Callable[[grpc.ServicerContext, str], None],
             method: str) -> Handler:
    """`handler` with `check(context, method)` run before its behaviour, for all four kinds; a
    unary request is read only once the check passed (an intruder's call that never sends its
    body holds no worker)."""
    if handler.unary_unary is not None or handler.unary_stream is not None:
        return checked_before_reading(handler, lambda context: check(context, method))
    if handler.stream_unary is not None:
        inner_su = handler.stream_unary

        def stream_unary(requests: Any, context: grpc.ServicerContext) -> Any:
            check(context, method)
            return inner_su(requests, context)

        return grpc.stream_unary_rpc_method_handler(stream_unary, handler.request_deserializer,
                                                    handler.response_serializer)
    inner_ss = handler.stream_stream
    assert inner_ss is not None, "a handler has one of the four behaviours"

    def stream_stream(requests: Any, context: grpc.ServicerContext) -> Any:
        check(context, method)
        yield from inner_ss(requests, context)

    return grpc.stream_stream_rpc_method_handler(stream_stream, handler.request_deserializer,
                                                 handler.response_serializer)
