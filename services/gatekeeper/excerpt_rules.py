"""`evidence.excerpt_mismatch` and `evidence.excerpt_too_short`.

Mismatch is checked first: an excerpt that does not occur in the ref's text is reject whatever its
length (a short fabricated `29%` must not get away with low_confid). A supported excerpt with
fewer characters of substance than the catalog's `min_excerpt_chars` is low_confid.
"""

from __future__ import annotations

from services.gatekeeper.findings import Finding
from services.gatekeeper.rule_catalog import EXCERPT_MISMATCH, EXCERPT_TOO_SHORT, RuleCatalog
from shared.core.contracts import EvidenceRef
from shared.excerpt_match import excerpt_fragments, match_normalized, normalize_for_match


class ExcerptChecker:
    """Checks excerpts against refs, normalising each ref's text once per gatekeeper check."""

    def __init__(self, catalog: RuleCatalog) -> None:
        self._catalog = catalog
        self._normal: dict[int, str] = {}
        self._refs: list[EvidenceRef] = []  # keeps cached refs alive so their id() stays unique

    def _normal_text(self, ref: EvidenceRef) -> str:
        key = id(ref)
        if key not in self._normal:
            self._normal[key] = normalize_for_match(ref.text)
            self._refs.append(ref)
        return self._normal[key]

    def check(self, excerpt: str, refs: list[EvidenceRef]) -> tuple[EvidenceRef | None, list[Finding]]:
        """(the ref whose text supports the excerpt, findings)."""
        fragments = excerpt_fragments(excerpt)
        supporting = next(
            (ref for ref in refs if match_normalized(fragments, self._normal_text(ref)).supported), None
        )
        if supporting is None:
            return None, [
                Finding(
                    EXCERPT_MISMATCH,
                    "reject",
                    f"excerpt {excerpt[:80]!r} is not supported by the text at {refs[0].raw_path[:120]!r}",
                )
            ]
        if self._catalog.is_enabled(EXCERPT_TOO_SHORT):
            minimum = self._catalog.int_parameter(EXCERPT_TOO_SHORT, "min_excerpt_chars")
            length = sum(len(fragment.replace(" ", "")) for fragment in fragments)
            if length < minimum:
                return supporting, [
                    Finding(
                        EXCERPT_TOO_SHORT,
                        "low_confid",
                        f"excerpt has {length} characters of substance, fewer than {minimum}",
                    )
                ]
        return supporting, []
