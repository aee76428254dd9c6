"""Which `ATTEST_*` variables each role reads, and nothing more (least privilege).

A role's process is given only the settings it reads, so that one compromised role holds no
other role's secrets: the gateway's bearer tokens stay in the gateway, the audit store's URL (and
its credentials) in the roles that open the store, the estate and backend credentials in the
executor, a model's API key in the roles that call a model.

The names are derived from the settings classes in shared/config.py (each field's variable,
aliases included), so a new setting reaches its role without a second list to update. Two facts
are not in those classes and are declared here:
- which roles open the audit store: every settings class inherits `database_url`, but only the
  gateway, the executor and the gatekeeper use it (their `__main__.py`);
- the verifier's `ATTEST_SEMANTIC_GUARD_*` settings, whose class lives in the verifier's package,
  which `shared/` may not import.

Used by the launcher (gateway/launcher.py) for each child process, and by deploy/check.py against
the compose file and the Kubernetes manifests. Variables outside `ATTEST_*` (PATH, PYTHONPATH,
OTEL_*) are not Attest's settings and pass unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache

from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from shared.config import (
    MODEL_ROLES,
    ComposerSettings,
    ExecutorSettings,
    GatekeeperSettings,
    GatewaySettings,
    ModelSettings,
    PlannerSettings,
    ServiceSettings,
    VerifierSettings,
)

PREFIX = "ATTEST_"
ROLES: tuple[str, ...] = ("gateway", "planner", "executor", "gatekeeper", "verifier", "composer")
SETTINGS_CLASSES: dict[str, type[ServiceSettings]] = {
    "gateway": GatewaySettings,
    "planner": PlannerSettings,
    "executor": ExecutorSettings,
    "gatekeeper": GatekeeperSettings,
    "verifier": VerifierSettings,
    "composer": ComposerSettings,
}
AUDIT_STORE_URL = "ATTEST_DATABASE_URL"
# The roles that write or read the audit store (the rest never open it).
AUDIT_STORE_ROLES = frozenset({"gateway", "executor", "gatekeeper"})
# Settings read through classes that shared/ cannot import (services/verifier/semantic_guard_settings.py).
EXTRA_PREFIXES: dict[str, tuple[str, ...]] = {"verifier": ("ATTEST_SEMANTIC_GUARD_",)}


def setting_variables(settings_class: type[BaseSettings], prefix: str | None = None) -> frozenset[str]:
    """The environment variables a settings class reads (upper case; names are case-insensitive)."""
    env_prefix = prefix if prefix is not None else str(settings_class.model_config.get("env_prefix", ""))
    names: set[str] = set()
    for field_name, info in settings_class.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(str(choice).upper() for choice in alias.choices if isinstance(choice, str))
        elif isinstance(alias, str):
            names.add(alias.upper())
        else:
            names.add(f"{env_prefix}{field_name}".upper())
    return frozenset(names)


def model_variables(role: str) -> frozenset[str]:
    """What `model_settings_for(role)` reads: the global `ATTEST_MODEL_*` and the role's own
    `ATTEST_<ROLE>_MODEL_*`; nothing for a role without a model."""
    if role not in MODEL_ROLES:
        return frozenset()
    return setting_variables(ModelSettings) | setting_variables(ModelSettings, f"ATTEST_{role.upper()}_MODEL_")


@cache
def role_variables(role: str) -> frozenset[str]:
    """Every `ATTEST_*` variable `role` reads (its settings, its model's, the audit store's URL
    only where the store is opened)."""
    if role not in SETTINGS_CLASSES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    names = setting_variables(SETTINGS_CLASSES[role]) | model_variables(role)
    if role not in AUDIT_STORE_ROLES:
        names -= {AUDIT_STORE_URL}
    return frozenset(name for name in names if name.startswith(PREFIX))


def reads(role: str, name: str) -> bool:
    """Whether `role` reads the variable `name` (any case, as pydantic-settings matches it)."""
    upper = name.upper()
    return upper in role_variables(role) or upper.startswith(EXTRA_PREFIXES.get(role, ()))


def is_attest_variable(name: str) -> bool:
    return name.upper().startswith(PREFIX)


def foreign_variables(role: str, names: Iterable[str]) -> list[str]:
    """The `ATTEST_*` names among `names` that `role` does not read, sorted."""
    return sorted(name for name in names if is_attest_variable(name) and not reads(role, name))


def environment_for(role: str, environment: Mapping[str, str]) -> dict[str, str]:
    """`environment` without the `ATTEST_*` variables `role` does not read."""
    return {name: value for name, value in environment.items() if not is_attest_variable(name) or reads(role, name)}
