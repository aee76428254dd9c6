"""`evidence.excerpt_mismatch` and `evidence.excerpt_too_short`.

Mismatch is checked first: an excerpt that does not occur in the ref's text is reject whatever its
length (a short fabricated `29%` must not get away with low_confid). A supported excerpt with
fewer characters of substance than the catalog's `min_excerpt_chars` is low_confid.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.gatekeeper.findings import Finding
from services.gatekeeper.rule_catalog import EXCERPT_MISMATCH, EXCERPT_TOO_SHORT, CatalogParameters
from shared.core.evidence_view import CitedRef
from shared.core.excerpt_match import excerpt_fragments, fragments_supported, normalize_for_match


class ExcerptChecker:
    """Checks excerpts against refs. Within one gatekeeper check each ref's text and each excerpt
    is normalised once, however many bindings cite or repeat it."""

    def __init__(self, parameters: CatalogParameters) -> None:
        self._parameters = parameters
        self._normal: dict[str, str] = {}  # ref text -> its normal form
        self._excerpts: dict[str, tuple[list[str], int]] = {}  # excerpt -> (fragments, characters of substance)

    def _normal_text(self, text: str) -> str:
        normal = self._normal.get(text)
        if normal is None:
            normal = self._normal[text] = normalize_for_match(text)
        return normal

    def _fragments(self, excerpt: str) -> tuple[list[str], int]:
        known = self._excerpts.get(excerpt)
        if known is None:
            fragments = excerpt_fragments(excerpt)
            known = self._excerpts[excerpt] = (fragments, sum(len(fragment.replace(" ", "")) for fragment in fragments))
        return known

    def check(self, excerpt: str, refs: Sequence[CitedRef]) -> tuple[CitedRef | None, list[Finding]]:
        """(the ref whose text supports the excerpt, findings)."""
        fragments, length = self._fragments(excerpt)
        supporting = next((ref for ref in refs if fragments_supported(fragments, self._normal_text(ref.text))), None)
        if supporting is None:
            return None, [
                Finding(
                    EXCERPT_MISMATCH,
                    "reject",
                    # The ref's path is the store's (it matched a stored evidence ref).
                    f"not supported by the text at {refs[0].raw_path[:120]!r}",
                    "evidence_excerpt",
                    excerpt,
                )
            ]
        if self._parameters.is_enabled(EXCERPT_TOO_SHORT):
            minimum = self._parameters.int_parameter(EXCERPT_TOO_SHORT, "min_excerpt_chars")
            if length < minimum:
                return supporting, [
                    Finding(
                        EXCERPT_TOO_SHORT,
                        "low_confid",
                        f"{length} characters of substance, fewer than {minimum}",
                        "evidence_excerpt",
                    )
                ]
        return supporting, []
