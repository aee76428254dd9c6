"""An invocation's evidence refs as the executor's own readers take them: raw_path and text.

The evidence view (`shared/core/evidence_view.py`) hands out the contract's EvidenceRefs, one
built per ref. The embedded agent's derivation, its link check and the tool trace summary read
only each ref's `raw_path` and `text`, so for a result whose refs are rendered they take the
rendered refs themselves: the same list, in the same order, kept with the parsed result (issue 19).
A row holding an explicit list (written before the view) is read through the view, as stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from shared.core.contracts import ToolInvocation
from shared.core.evidence_view import evidence_view
from shared.core.tool_results import read_result, rendered_refs


class TextRef(Protocol):
    """What these readers use of a ref (an EvidenceRef or a rendered ref)."""

    @property
    def raw_path(self) -> str: ...

    @property
    def text(self) -> str: ...


def ref_texts(invocation: ToolInvocation) -> Sequence[TextRef]:
    """The refs of `evidence_view(invocation).refs()`, in its order, with its paths and texts."""
    details = invocation.retrieval_details
    if details is None or not details.refs_rendered:
        return evidence_view(invocation).refs()
    result = read_result(invocation.tool_name, invocation.agent_result)
    return [] if result is None else rendered_refs(result)
