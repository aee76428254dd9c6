"""Typed clients for the five downstream roles, sharing one channel per address.

Every call's deadline is the remaining deadline of the whole diagnosis (never a fresh one), so a
slow hop can never outlive the request that caused it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc

from attest.common.v1 import enums_pb2
from attest.composer.v1 import composer_pb2, composer_pb2_grpc
from attest.executor.v1 import executor_pb2, executor_pb2_grpc
from attest.gatekeeper.v1 import gatekeeper_pb2, gatekeeper_pb2_grpc
from attest.planner.v1 import planner_pb2, planner_pb2_grpc
from attest.verifier.v1 import verifier_pb2, verifier_pb2_grpc
from shared.channels import ChannelPool, IdempotentMethod
from shared.core.contracts import PromptRef
from shared.proto_convert import enum_number

log = logging.getLogger(__name__)
RequestT = TypeVar("RequestT")
ResponseT = TypeVar("ResponseT")
# How long the roles may take to say which prompts they use. The calls run beside the diagnosis;
# only a run that ends sooner waits for them, and then at most this long.
DESCRIBE_PROMPTS_TIMEOUT_SECONDS = 2.0


class DownstreamFailed(Exception):
    """A call to a role failed: which role, its status code, and the status details."""

    def __init__(self, node: str, code: grpc.StatusCode | None, detail: str) -> None:
        super().__init__(f"{node}: {code.name if code else 'ERROR'}: {detail}")
        self.node = node
        self.code = code
        self.detail = detail


@dataclass
class Deadline:
    """Absolute deadline of one diagnosis."""

    expires_at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def remaining(self, floor: float = 0.05) -> float:
        return max(floor, self.expires_at - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.expires_at


class DownstreamCall(Protocol):
    """One unary call to a role within the diagnosis's deadline (`DiagnosisGraph._call`)."""

    def __call__(self, node: str, method: grpc.UnaryUnaryMultiCallable[RequestT, ResponseT], request: RequestT,
                 deadline: Deadline, is_active: Callable[[], bool]) -> ResponseT: ...


def _service(descriptor: Any) -> str:
    return str(descriptor.full_name)


# What the gateway may call again when a call found no replica or lost it (ChannelPool's retry
# policy): everything but the executor's two calls that run tools and write them into the run
# (those are retried once, as a new attempt, by gateway/replica_retry.py). The planner, the
# gatekeeper, the verifier and the composer write nothing; a repeated call costs model tokens at
# most.
IDEMPOTENT_METHODS: tuple[IdempotentMethod, ...] = (
    IdempotentMethod(_service(planner_pb2.DESCRIPTOR.services_by_name["PlannerService"])),
    IdempotentMethod(_service(gatekeeper_pb2.DESCRIPTOR.services_by_name["GatekeeperService"])),
    IdempotentMethod(_service(verifier_pb2.DESCRIPTOR.services_by_name["VerifierService"])),
    IdempotentMethod(_service(composer_pb2.DESCRIPTOR.services_by_name["ComposerService"])),
    IdempotentMethod(_service(executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"]), "RepairDraft"),
    IdempotentMethod(_service(executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"]), "DescribePrompts"),
)


class DownstreamClients:
    def __init__(self, pool: ChannelPool, *, planner: str, executor: str, gatekeeper: str,
                 verifier: str, composer: str) -> None:
        self.planner = planner_pb2_grpc.PlannerServiceStub(pool.get(planner, "planner"))
        # The executor's channel itself: its retry waits for a replica to connect.
        self.executor_channel = pool.get(executor, "executor")
        self.executor = executor_pb2_grpc.ExecutorServiceStub(self.executor_channel)
        self.gatekeeper = gatekeeper_pb2_grpc.GatekeeperServiceStub(pool.get(gatekeeper, "gatekeeper"))
        self.verifier = verifier_pb2_grpc.VerifierServiceStub(pool.get(verifier, "verifier"))
        self.composer = composer_pb2_grpc.ComposerServiceStub(pool.get(composer, "composer"))


# Per role: the prompts it reported for the run's mode ([] when the mode does not call it), or
# None when it could not be asked.
ReportedPrompts = dict[str, list[PromptRef] | None]


class PromptDescriptions:
    """Which prompts the four model-backed roles use with their configured engines, per diagnosis
    mode, as each reports it (`DescribePrompts`).

    A mode's roles are asked at its first run, in parallel and beside the diagnosis, never before
    it. An answer is kept for the life of the gateway; a role that could not be asked (down, slow,
    an error) is asked again at the next run, so that the audit never guesses its prompts.
    """

    def __init__(self, clients: DownstreamClients,
                 timeout_seconds: float = DESCRIBE_PROMPTS_TIMEOUT_SECONDS) -> None:
        self._roles: dict[str, tuple[Any, Any]] = {
            "planner": (clients.planner.DescribePrompts, planner_pb2.DescribePromptsRequest),
            "executor": (clients.executor.DescribePrompts, executor_pb2.DescribePromptsRequest),
            "verifier": (clients.verifier.DescribePrompts, verifier_pb2.DescribePromptsRequest),
            "composer": (clients.composer.DescribePrompts, composer_pb2.DescribePromptsRequest),
        }
        self._timeout = timeout_seconds
        self._lock = threading.Lock()
        self._answers: dict[tuple[str, str], list[PromptRef]] = {}
        self._asking: dict[tuple[str, str], grpc.Future[Any]] = {}

    def start(self, mode: str) -> Callable[[], ReportedPrompts]:
        """Ask every role that has not answered for `mode` yet (unless a call is on its way), and
        return how to read the answers: each at most `timeout_seconds` after it was asked."""
        asked: dict[str, grpc.Future[Any] | None] = {}
        with self._lock:
            for role, (method, request_type) in self._roles.items():
                key = (role, mode)
                if key not in self._answers and key not in self._asking:
                    request = request_type(mode=enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, mode))
                    try:
                        self._asking[key] = method.future(request, timeout=self._timeout)
                    except (grpc.RpcError, ValueError):  # e.g. a closed channel: the role is `unknown`
                        log.warning("could not ask %s which prompts it uses", role, exc_info=True)
                asked[role] = self._asking.get(key)
        return lambda: {role: self._answer(role, mode, future) for role, future in asked.items()}

    def _answer(self, role: str, mode: str, future: grpc.Future[Any] | None) -> list[PromptRef] | None:
        key = (role, mode)
        with self._lock:
            if key in self._answers:
                return list(self._answers[key])
        if future is None:
            return None
        try:
            response = future.result()  # bounded by the call's own deadline
        except (grpc.RpcError, grpc.FutureCancelledError) as exc:
            with self._lock:
                if self._asking.get(key) is future:
                    del self._asking[key]  # the next run asks again
            code = exc.code() if isinstance(exc, grpc.Call) else None
            reason = code.name if code is not None else type(exc).__name__
            log.warning("%s did not say which prompts it uses (%s mode): %s", role, mode, reason)
            return None
        # A ref keeps the role its calls report (the SemanticGuard's is `semantic_guard`).
        prompts = [PromptRef(role=ref.role or role, name=ref.name, version=ref.version) for ref in response.prompts]
        with self._lock:
            self._answers[key] = prompts
            if self._asking.get(key) is future:
                del self._asking[key]
        log.info("%s (%s) uses %s in %s mode", role, response.provider or "?",
                 ", ".join(f"{p.name} v{p.version}" for p in prompts) or "no prompt", mode)
        return list(prompts)
