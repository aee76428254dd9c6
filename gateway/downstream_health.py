"""The gateway's readiness: every role it needs must answer its health check with SERVING.

Without a role the gateway only answers fallbacks, so it reports NOT_SERVING while one is down or
not serving; Kubernetes then stops routing frontends to it. The checks use
their own untraced channels (health probes are not traced), secured like the gateway's others.
"""

from __future__ import annotations

from shared.channels import ChannelPool, Keepalive
from shared.config import GatewaySettings
from shared.readiness import Check, downstream_check
from shared.transport_security import client_credentials


def required_roles(settings: GatewaySettings) -> dict[str, str]:
    """Role → address of every role a diagnosis needs."""
    return {
        "planner": settings.planner_addr,
        "executor": settings.executor_addr,
        "gatekeeper": settings.gatekeeper_addr,
        "verifier": settings.verifier_addr,
        "composer": settings.composer_addr,
    }


def downstream_checks(settings: GatewaySettings) -> dict[str, Check]:
    """One readiness check per required role, over mutual TLS unless ATTEST_INSECURE=1."""
    pool = ChannelPool(credentials=client_credentials(settings), keepalive=Keepalive.from_settings(settings))
    return {
        role: downstream_check(role, pool.get(addr, role), settings.readiness_timeout_seconds)
        for role, addr in required_roles(settings).items()
    }
