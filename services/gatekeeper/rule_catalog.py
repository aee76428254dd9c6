"""The gatekeeper rule catalog: metadata and simple parameters, never behaviour.

Graph spec, "Gatekeeper rule catalog SHALL remain deterministic": the catalog is a JSON data file
(`rule_catalog.json`) read with `json.load`; nothing in it is evaluated or imported. The rules
themselves are code (`schema_rules.py`, `invocation_rules.py`, `raw_path_rules.py`,
`excerpt_rules.py`).

A catalog cannot weaken the gatekeeper: the loader refuses a catalog that omits or disables a
fidelity rule, declares a severity different from the code's, names a rule no code implements, or
sets a parameter outside its allowed range. Only `evidence.excerpt_too_short` may be disabled.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field, PrivateAttr, ValidationError

from shared.core.contracts import RuleMetadata

SCHEMA_EXECUTOR_V2 = "schema.executor_v2"
INVOCATION_REF = "evidence.invocation_ref"
INVOCATION_STATE = "evidence.invocation_state"
POLARITY = "evidence.polarity"
RAW_PATH = "evidence.raw_path"
EXCERPT_TOO_SHORT = "evidence.excerpt_too_short"
EXCERPT_MISMATCH = "evidence.excerpt_mismatch"

# The default severity each rule has in code; the catalog must agree.
CODE_SEVERITIES: dict[str, str] = {
    SCHEMA_EXECUTOR_V2: "low_confid",
    INVOCATION_REF: "reject",
    INVOCATION_STATE: "reject",
    POLARITY: "reject",
    RAW_PATH: "reject",
    EXCERPT_TOO_SHORT: "low_confid",
    EXCERPT_MISMATCH: "reject",
}
OPTIONAL_RULES: frozenset[str] = frozenset({EXCERPT_TOO_SHORT})

# (rule id, parameter) -> (minimum, maximum) for the integer parameters the code reads.
_INT_PARAMETERS: dict[tuple[str, str], tuple[int, int]] = {
    (SCHEMA_EXECUTOR_V2, "max_claims"): (1, 1000),
    (SCHEMA_EXECUTOR_V2, "max_bindings_per_claim"): (1, 100),
    (SCHEMA_EXECUTOR_V2, "max_claim_text_chars"): (16, 20000),
    (SCHEMA_EXECUTOR_V2, "max_excerpt_chars"): (16, 20000),
    (SCHEMA_EXECUTOR_V2, "max_list_items"): (0, 500),
    (SCHEMA_EXECUTOR_V2, "max_item_text_chars"): (16, 20000),
    (EXCERPT_TOO_SHORT, "min_excerpt_chars"): (1, 64),
    (EXCERPT_MISMATCH, "matched_text_max_chars"): (200, 100000),
}
_PARAMETER_DEFAULTS: dict[tuple[str, str], int] = {
    (SCHEMA_EXECUTOR_V2, "max_claims"): 100,
    (SCHEMA_EXECUTOR_V2, "max_bindings_per_claim"): 20,
    (SCHEMA_EXECUTOR_V2, "max_claim_text_chars"): 2000,
    (SCHEMA_EXECUTOR_V2, "max_excerpt_chars"): 4000,
    (SCHEMA_EXECUTOR_V2, "max_list_items"): 50,
    (SCHEMA_EXECUTOR_V2, "max_item_text_chars"): 1000,
    (EXCERPT_TOO_SHORT, "min_excerpt_chars"): 4,
    (EXCERPT_MISMATCH, "matched_text_max_chars"): 2000,
}

DEFAULT_CATALOG_PATH = Path(__file__).with_name("rule_catalog.json")


class RuleCatalogError(ValueError):
    """The catalog file is unreadable or would change what the gatekeeper guarantees."""


class RuleCatalog(BaseModel):
    rule_set_version: str = Field(min_length=1)
    rules: list[RuleMetadata]

    # rule() by id: built from the rules list it was built for (a copy with other rules, or a
    # list grown in place, builds it again).
    _index: tuple[list[RuleMetadata], int, dict[str, RuleMetadata]] | None = PrivateAttr(default=None)

    def rule(self, rule_id: str) -> RuleMetadata | None:
        private = self.__pydantic_private__ or {}  # read directly: pydantic's private-attribute lookup is slow
        index = private.get("_index")
        if index is None or index[0] is not self.rules or index[1] != len(self.rules):
            by_id: dict[str, RuleMetadata] = {}
            for found in self.rules:
                by_id.setdefault(found.id, found)  # the first of a repeated id, as a scan finds it
            index = self._index = (self.rules, len(self.rules), by_id)
        return index[2].get(rule_id)

    def is_enabled(self, rule_id: str) -> bool:
        found = self.rule(rule_id)
        return bool(found and found.enabled)

    def enabled_rules(self) -> list[RuleMetadata]:
        """Metadata of the enabled rules, as every gatekeeper_result reports it (copies)."""
        return [r.model_copy(deep=True) for r in self.rules if r.enabled]

    def int_parameter(self, rule_id: str, name: str) -> int:
        found = self.rule(rule_id)
        value = found.parameters.get(name) if found else None
        if value is None:
            return _PARAMETER_DEFAULTS[(rule_id, name)]
        return int(value)


class CatalogParameters(Protocol):
    """What the rules read from a catalog: a RuleCatalog, or the memo one check keeps of it."""

    def is_enabled(self, rule_id: str) -> bool: ...

    def int_parameter(self, rule_id: str, name: str) -> int: ...


class CheckParameters:
    """The catalog as one check reads it: each answer looked up once, however many bindings ask
    (a lookup that fails is not kept, so it fails again wherever the catalog's would)."""

    def __init__(self, catalog: RuleCatalog) -> None:
        self._catalog = catalog
        self._enabled: dict[str, bool] = {}
        self._ints: dict[tuple[str, str], int] = {}

    def is_enabled(self, rule_id: str) -> bool:
        enabled = self._enabled.get(rule_id)
        if enabled is None:
            enabled = self._enabled[rule_id] = self._catalog.is_enabled(rule_id)
        return enabled

    def int_parameter(self, rule_id: str, name: str) -> int:
        value = self._ints.get((rule_id, name))
        if value is None:
            value = self._ints[(rule_id, name)] = self._catalog.int_parameter(rule_id, name)
        return value


def _check_parameter_value(value: Any, where: str) -> None:
    scalar = (str, int, float, bool, type(None))
    if isinstance(value, scalar):
        return
    if isinstance(value, list) and all(isinstance(item, scalar) for item in value):
        return
    raise RuleCatalogError(f"{where}: parameters are JSON scalars or lists of scalars only")


def validate_catalog(catalog: RuleCatalog) -> RuleCatalog:
    seen: set[str] = set()
    for rule in catalog.rules:
        if rule.id in seen:
            raise RuleCatalogError(f"rule {rule.id!r} appears twice")
        seen.add(rule.id)
        if rule.id not in CODE_SEVERITIES:
            raise RuleCatalogError(f"rule {rule.id!r} is not implemented by the gatekeeper")
        if rule.default_severity != CODE_SEVERITIES[rule.id]:
            raise RuleCatalogError(
                f"rule {rule.id!r}: default_severity {rule.default_severity!r} differs from the "
                f"code's {CODE_SEVERITIES[rule.id]!r}"
            )
        if not rule.enabled and rule.id not in OPTIONAL_RULES:
            raise RuleCatalogError(f"rule {rule.id!r} guards evidence fidelity and cannot be disabled")
        for name, value in rule.parameters.items():
            _check_parameter_value(value, f"rule {rule.id!r} parameter {name!r}")
            bounds = _INT_PARAMETERS.get((rule.id, name))
            if bounds is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise RuleCatalogError(f"rule {rule.id!r} parameter {name!r} must be an integer")
                low, high = bounds
                if not low <= value <= high:
                    raise RuleCatalogError(
                        f"rule {rule.id!r} parameter {name!r}={value} outside [{low}, {high}]"
                    )
    missing = set(CODE_SEVERITIES) - seen
    if missing:
        raise RuleCatalogError(f"catalog lacks rules {sorted(missing)}")
    return catalog


def parse_rule_catalog(data: Any) -> RuleCatalog:
    try:
        catalog = RuleCatalog.model_validate(data)
    except ValidationError as exc:
        raise RuleCatalogError(f"catalog shape: {exc.errors()[0].get('msg', exc)}") from None
    return validate_catalog(catalog)


@lru_cache(maxsize=8)
def _load_cached(path: str) -> RuleCatalog:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise RuleCatalogError(f"cannot read rule catalog {path}: {exc}") from None
    return parse_rule_catalog(data)


def shared_default_catalog() -> RuleCatalog:
    """The shipped catalog as one shared instance, for callers that only read it (the engine):
    no copy per check. Never modify it; use `load_rule_catalog()` for a private copy."""
    return _load_cached(str(DEFAULT_CATALOG_PATH))


def load_rule_catalog(path: str | Path | None = None) -> RuleCatalog:
    """Load and validate a catalog file (default: the shipped `rule_catalog.json`).

    Returns a private copy, so callers cannot alter the cached catalog.
    """
    return _load_cached(str(path or DEFAULT_CATALOG_PATH)).model_copy(deep=True)
