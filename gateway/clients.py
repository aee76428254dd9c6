"""Typed clients for the five downstream roles, sharing one channel per address.

Every call's deadline is the remaining deadline of the whole diagnosis (never a fresh one), so a
slow hop can never outlive the request that caused it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from attest.composer.v1 import composer_pb2_grpc
from attest.executor.v1 import executor_pb2_grpc
from attest.gatekeeper.v1 import gatekeeper_pb2_grpc
from attest.planner.v1 import planner_pb2_grpc
from attest.verifier.v1 import verifier_pb2_grpc
from shared.channels import ChannelPool


@dataclass
class Deadline:
    """Absolute deadline of one diagnosis."""

    expires_at: float

    @classmethod
    def after(cls, seconds: float) -> "Deadline":
        return cls(time.monotonic() + seconds)

    def remaining(self, floor: float = 0.05) -> float:
        return max(floor, self.expires_at - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.expires_at


class DownstreamClients:
    def __init__(self, pool: ChannelPool, *, planner: str, executor: str, gatekeeper: str,
                 verifier: str, composer: str) -> None:
        self.planner = planner_pb2_grpc.PlannerServiceStub(pool.get(planner))
        self.executor = executor_pb2_grpc.ExecutorServiceStub(pool.get(executor))
        self.gatekeeper = gatekeeper_pb2_grpc.GatekeeperServiceStub(pool.get(gatekeeper))
        self.verifier = verifier_pb2_grpc.VerifierServiceStub(pool.get(verifier))
        self.composer = composer_pb2_grpc.ComposerServiceStub(pool.get(composer))
