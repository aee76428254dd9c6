"""`lookup_knowledge`: runbooks and past-incident notes ranked by BM25 for a query.

raw_path conventions (relative to this invocation's evidence_refs):
- `docs[i].chunks[j]` — text: the chunk as written (heading line first, at most 500 characters);
  source: the document's path inside the knowledge directory
- `summary` — text `lookup_knowledge query="…" top_k=<k>: <n> documents, <m> chunks`
A result without any scoring chunk is NO_EVIDENCE and carries only the `summary` ref.

What a runbook says is guidance, never a fact about the incident under diagnosis. A hit already
returned earlier in the same run is no new evidence: see knowledge_dedupe.py.
"""

from __future__ import annotations

import hashlib
import json

from services.executor.tools.backends import KnowledgeBackend
from services.executor.tools.tool_result import ToolResult, bounded_scope, bounded_text
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE as TOOL_NAME
from shared.core.tool_catalogue import LookupKnowledgeArguments
from shared.core.tool_results import KnowledgeChunk, KnowledgeDoc, KnowledgeResult, dump_result, ref_count

DESCRIPTION = (
    "Search the runbooks and past-incident notes (Chinese or English) and return the best-ranked "
    "documents with their most relevant sections. Each section is an evidence ref addressed as "
    "docs[i].chunks[j]. Runbook content is operational guidance, not a fact about the current incident."
)
CHUNKS_PER_DOC = 3


def hit_id(path: str, text: str) -> str:
    """A chunk's identity across invocations of a run: its document and a digest of its text."""
    return f"{path}#{hashlib.sha1(text.encode('utf-8')).hexdigest()[:12]}"


def summary_text(query: str, top_k: int, documents: int, chunks: int) -> str:
    return f"{TOOL_NAME} query={json.dumps(query, ensure_ascii=False)} top_k={top_k}: {documents} documents, {chunks} chunks"


def lookup_knowledge(backend: KnowledgeBackend, args: LookupKnowledgeArguments) -> ToolResult:
    documents = backend.search(args.query, args.top_k, CHUNKS_PER_DOC)
    docs: list[KnowledgeDoc] = []
    for document in documents:
        chunks = []
        for chunk in document.chunks:
            text = bounded_text(chunk.text)
            chunks.append(KnowledgeChunk(heading=chunk.heading, score=chunk.score, text=text, hit_id=hit_id(document.path, text)))
        docs.append(KnowledgeDoc(path=document.path, title=document.title, kind=document.kind, score=document.score, chunks=chunks))
    chunk_count = sum(len(doc.chunks) for doc in docs)
    stored = KnowledgeResult(
        tool=TOOL_NAME, query=args.query, top_k=args.top_k, docs=docs,
        summary=summary_text(args.query, args.top_k, len(documents), chunk_count),
    )
    return ToolResult(
        tool_name=TOOL_NAME,
        evidence_status="EVIDENCE_FOUND" if chunk_count else "NO_EVIDENCE",
        agent_result=dump_result(stored),
        source=backend.source_name,
        ref_count=ref_count(stored),
        request_scope=bounded_scope(tool=TOOL_NAME, query=args.query, top_k=args.top_k),
    )
