"""Knowledge search: BM25 over a directory of Markdown runbooks and past-incident notes.

Every `*.md` file under the directory is cut into chunks (markdown_chunks.py), each chunk is
indexed with the document title and its heading path in front of its own words (a title word
says what every section is about), and a query is ranked with BM25 (the `bm25s` library, Lucene
variant) over tokens that handle Chinese (search_tokenizer.py). A document ranks by its best
chunk. The index is built once, on first use, and rebuilt when a file changes.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np

from services.executor.tools.backends import BackendError, KnowledgeChunk, KnowledgeDocument
from services.executor.tools.markdown_chunks import parse_markdown
from services.executor.tools.search_tokenizer import tokenize

log = logging.getLogger(__name__)

MAX_FILES = 2000
MAX_FILE_BYTES = 512 * 1024


@dataclass(frozen=True)
class _IndexedChunk:
    doc: int
    heading: str
    text: str


@dataclass(frozen=True)
class _IndexedDoc:
    path: str
    title: str
    kind: str


class _Index:
    def __init__(self, docs: list[_IndexedDoc], chunks: list[_IndexedChunk], token_lists: list[list[str]]) -> None:
        self.docs = docs
        self.chunks = chunks
        self.ranker: bm25s.BM25 | None = None
        if chunks:
            self.ranker = bm25s.BM25()  # k1=1.5, b=0.75, Lucene idf: never negative
            self.ranker.index(token_lists, show_progress=False)

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        if self.ranker is None or not query_tokens:
            return np.zeros(len(self.chunks))
        return np.asarray(self.ranker.get_scores(query_tokens), dtype=float)


class MarkdownKnowledgeBase:
    """A KnowledgeBackend over `directory` (searched recursively for `*.md`)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.source_name = f"knowledge:{self.directory.name}"
        self._lock = threading.Lock()
        self._index: _Index | None = None
        self._signature: tuple[Any, ...] | None = None

    def search(self, query: str, top_k: int, chunks_per_doc: int) -> list[KnowledgeDocument]:
        index = self._current_index()
        scores = index.scores(tokenize(query))
        best: dict[int, list[tuple[float, int]]] = {}
        for position in np.flatnonzero(scores > 0):
            chunk = index.chunks[position]
            best.setdefault(chunk.doc, []).append((float(scores[position]), int(position)))
        ranked = sorted(best.items(), key=lambda item: (-max(s for s, _ in item[1]), index.docs[item[0]].path))
        documents: list[KnowledgeDocument] = []
        for doc_id, hits in ranked[:top_k]:
            hits.sort(key=lambda hit: (-hit[0], hit[1]))
            doc = index.docs[doc_id]
            documents.append(KnowledgeDocument(
                path=doc.path,
                title=doc.title,
                kind=doc.kind,
                score=round(hits[0][0], 4),
                chunks=[
                    KnowledgeChunk(heading=index.chunks[p].heading, text=index.chunks[p].text, score=round(s, 4))
                    for s, p in hits[:chunks_per_doc]
                ],
            ))
        return documents

    def prebuild(self) -> None:
        """Build the index now (the first search would otherwise pay for it: about a second on the
        demo runbooks, mostly loading the Chinese segmenter's dictionary). A failure is logged
        only; the tool reports it when a search is made."""
        try:
            self._current_index()
        except Exception:  # noqa: BLE001 - start-up must not fail over an optional warm-up
            log.warning("knowledge index: prebuild failed; the first lookup will retry", exc_info=True)

    # --- the index -----------------------------------------------------------------------------

    def _files(self) -> list[Path]:
        if not self.directory.is_dir():
            raise BackendError(f"knowledge directory not found: {self.directory}")
        # A README describes the directory itself; it is not knowledge.
        files = sorted(p for p in self.directory.rglob("*.md") if p.is_file() and p.name.lower() != "readme.md")
        return files[:MAX_FILES]

    def _current_index(self) -> _Index:
        files = self._files()
        signature = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files)
        with self._lock:
            if self._index is None or signature != self._signature:
                self._index = self._build(files)
                self._signature = signature
            return self._index

    def _build(self, files: list[Path]) -> _Index:
        docs: list[_IndexedDoc] = []
        chunks: list[_IndexedChunk] = []
        token_lists: list[list[str]] = []
        for path in files:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            relative = path.relative_to(self.directory).as_posix()
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue  # an unreadable file is not knowledge; the others still are
            parsed = parse_markdown(text, fallback_title=path.stem)
            kind = parsed.front_matter.get("kind") or _kind_from_folder(relative)
            doc_id = len(docs)
            docs.append(_IndexedDoc(path=relative, title=parsed.title, kind=kind))
            title_tokens = tokenize(parsed.title)
            for chunk in parsed.chunks:
                tokens = title_tokens + tokenize(chunk.heading) + tokenize(chunk.text)
                if not tokens:
                    continue
                chunks.append(_IndexedChunk(doc=doc_id, heading=chunk.heading, text=chunk.text))
                token_lists.append(tokens)
        return _Index(docs, chunks, token_lists)


def _kind_from_folder(relative: str) -> str:
    folder = relative.split("/", 1)[0] if "/" in relative else ""
    if folder.startswith("runbook"):
        return "runbook"
    if folder.startswith(("incident", "postmortem")):
        return "incident"
    return "note"
