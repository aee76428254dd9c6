"""A servicer called in process through grpcio-testing, shaped like a generated stub.

`grpc_testing.server_from_dictionary` runs the servicer's own methods with a real
ServicerContext (deadline, cancellation, abort, trailing metadata), but with no port, no channel
and no interceptors. So it suits a test of what a servicer answers; what the interceptors add
(domain errors mapped to status codes, caller identity, stream limits) is tested over a real
server (`serve_role` in conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc
import grpc_testing
from google.protobuf.descriptor import ServiceDescriptor


class InProcessRpcError(grpc.RpcError):
    """A call that ended with a status other than OK, read as a stub's error is read."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class InProcessStub:
    """`stub.Method(request, timeout=…)` for every unary method of `service`, on `servicer`."""

    def __init__(self, service: ServiceDescriptor, servicer: Any) -> None:
        self._service = service
        self._server = grpc_testing.server_from_dictionary({service: servicer}, grpc_testing.strict_real_time())

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = self._service.methods_by_name.get(name)
        if method is None or method.client_streaming or method.server_streaming:
            raise AttributeError(f"{self._service.full_name} has no unary method {name}")

        def call(request: Any, timeout: float | None = None, metadata: Sequence[tuple[str, str]] = ()) -> Any:
            rpc = self._server.invoke_unary_unary(method, tuple(metadata), request, timeout)
            response, _trailing, code, details = rpc.termination()
            if code is not grpc.StatusCode.OK:
                raise InProcessRpcError(code, details)
            return response

        return call
