"""An invocation's evidence refs, rendered on demand from its stored result.

An evidence tool stores its typed result once (`agent_result`) and, in `retrieval_details`, only
what the refs need besides it: the backend's name (`source`), `refs_rendered`, and the number of
refs (`ref_count`, for audits that count without reading). The refs themselves are a view: a
`raw_path` is looked up by rendering that one ref (`shared.core.tool_results.ref_at`), and the whole
list is rendered only for what a model is shown. Rows written before this (and documents handed
to `attest gatekeeper-check`) may carry an explicit `evidence_refs` list; the view serves it as
stored. A `raw_path` is still read relative to `retrieval_details.evidence_refs`: the view is that
list, whichever way it is held.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.core.contracts import EvidenceRef, ToolInvocation
from shared.core.tool_results import RenderedRef, ToolResultData, read_result, ref_at, ref_count, rendered_refs

# A ref as a reader of its path and text gets it: rendered from the result, or as stored in a list.
CitedRef = RenderedRef | EvidenceRef


def as_evidence_ref(ref: RenderedRef, source: str) -> EvidenceRef:
    """A rendered ref as the contract's EvidenceRef: a knowledge chunk's source is its document,
    every other ref's the backend's name."""
    # Every value is a str the renderer made; validating four strs is cheaper than model_construct.
    return EvidenceRef(raw_path=ref.raw_path, text=ref.text, source=ref.document or source, timestamp=ref.timestamp)


class EvidenceView:
    """The refs of one invocation. An invocation without retrieval_details (a failed call, an old
    row) has none: no raw_path of it is valid."""

    __slots__ = ("_agent_result", "_all", "_count", "_details", "_explicit", "_read", "_result", "_tool_name")

    def __init__(self, invocation: ToolInvocation) -> None:
        self._tool_name = invocation.tool_name
        self._agent_result = invocation.agent_result
        self._details = invocation.retrieval_details
        self._explicit: dict[str, list[EvidenceRef]] | None = None
        self._result: ToolResultData | None = None
        self._read = False
        self._all: list[EvidenceRef] | None = None
        self._count: int | None = None

    def _typed(self) -> ToolResultData | None:
        if not self._read:
            self._result = read_result(self._tool_name, self._agent_result)
            self._read = True
        return self._result

    def _listed(self) -> dict[str, list[EvidenceRef]]:
        if self._explicit is None:
            self._explicit = {}
            for ref in self._details.evidence_refs if self._details is not None else []:
                self._explicit.setdefault(ref.raw_path.strip(), []).append(ref)
        return self._explicit

    def at(self, raw_path: str) -> list[EvidenceRef]:
        """The refs at `raw_path` (one, or none; an explicit list may repeat a path)."""
        if self._details is None:
            return []
        if not self._details.refs_rendered:
            return list(self._listed().get(raw_path, []))
        ref = self._rendered_at(raw_path)
        return [] if ref is None else [as_evidence_ref(ref, self._details.source)]

    def cited_at(self, raw_path: str) -> Sequence[CitedRef]:
        """`at` for a reader of path and text only: a rendered ref is not turned into an
        EvidenceRef (the same path and text). Do not modify what it returns."""
        if self._details is None:
            return ()
        if not self._details.refs_rendered:
            return self._listed().get(raw_path, ())
        ref = self._rendered_at(raw_path)
        return () if ref is None else (ref,)

    def cited_refs(self) -> Sequence[CitedRef]:
        """`refs` for a reader of paths and texts only (the executor's derivation, its link check,
        the trace summary): the rendered refs themselves, kept with the parsed result, none turned
        into an EvidenceRef. Do not modify what it returns."""
        if self._details is None:
            return ()
        if not self._details.refs_rendered:
            return self._details.evidence_refs
        result = self._typed()
        return () if result is None else rendered_refs(result)

    def _rendered_at(self, raw_path: str) -> RenderedRef | None:
        result = self._typed()
        return ref_at(result, raw_path) if result is not None else None

    def refs(self) -> list[EvidenceRef]:
        """Every ref, in stored order (renders them all: for what a model is shown)."""
        if self._details is None:
            return []
        if not self._details.refs_rendered:
            return list(self._details.evidence_refs)
        if self._all is None:
            result = self._typed()
            self._all = [] if result is None else [as_evidence_ref(ref, self._details.source) for ref in rendered_refs(result)]
        return list(self._all)

    def count(self) -> int:
        """How many refs the view holds (none rendered)."""
        if self._details is None:
            return 0
        if not self._details.refs_rendered:
            return len(self._details.evidence_refs)
        if self._count is None:  # the result is frozen: its count is counted once
            result = self._typed()
            self._count = ref_count(result) if result is not None else 0
        return self._count


def evidence_view(invocation: ToolInvocation) -> EvidenceView:
    """The invocation's view, kept on it while its result and details are the same objects (a
    stored result is parsed once however many bindings cite it)."""
    cached = invocation._view
    if (isinstance(cached, EvidenceView) and cached._details is invocation.retrieval_details
            and cached._agent_result is invocation.agent_result and cached._tool_name == invocation.tool_name):
        return cached
    view = EvidenceView(invocation)
    invocation._view = view
    return view
