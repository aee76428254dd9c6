"""Markdown documents cut into search chunks: one chunk per section (a heading and its body),
long sections cut further at paragraph boundaries, every chunk bounded so that its whole text
fits in one evidence ref."""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_CHUNK_CHARS = 480
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class MarkdownChunk:
    heading: str  # the heading path below the title, e.g. "排查步骤 > 确认连接池状态"; "" for the lead
    text: str  # the chunk as written, heading line first, at most MAX_CHUNK_CHARS


@dataclass(frozen=True)
class MarkdownDocument:
    title: str
    front_matter: dict[str, str]
    chunks: list[MarkdownChunk]


def parse_markdown(text: str, fallback_title: str) -> MarkdownDocument:
    front_matter, body = _split_front_matter(text.replace("\r\n", "\n"))
    title = front_matter.get("title", "")
    sections: list[tuple[list[str], list[str]]] = []  # (heading path, lines)
    path: list[tuple[int, str]] = []
    lines: list[str] = []
    in_fence = False
    seen_title_heading = False
    for line in body.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
        heading = None if in_fence else _HEADING.match(line)
        if heading is None:
            lines.append(line)
            continue
        sections.append(([h for _, h in path], lines))
        level, name = len(heading.group(1)), heading.group(2).strip()
        if level == 1 and not seen_title_heading:
            # The document's first top-level heading is its title, not a section of it.
            seen_title_heading = True
            title = title or name
            path, lines = [], []
            continue
        path = [(lvl, h) for lvl, h in path if lvl < level] + [(level, name)]
        lines = [line]
    sections.append(([h for _, h in path], lines))
    title = title or fallback_title

    chunks: list[MarkdownChunk] = []
    for heading_path, section_lines in sections:
        joined = " > ".join(heading_path)
        for piece in _pieces(section_lines):
            chunks.append(MarkdownChunk(heading=joined, text=piece))
    return MarkdownDocument(title=title, front_matter=front_matter, chunks=chunks)


def _split_front_matter(text: str) -> tuple[dict[str, str], str]:
    """`---` delimited `key: value` lines at the top (a flat subset of YAML is enough here)."""
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---", 4)
    if end < 0:
        return {}, text
    values: dict[str, str] = {}
    for line in text[4:end].split("\n"):
        key, sep, value = line.partition(":")
        if sep and key.strip():
            values[key.strip().lower()] = value.strip().strip("'\"")
    return values, text[end + 4:].lstrip("\n")


def _pieces(lines: list[str]) -> list[str]:
    """The section's text in pieces of at most MAX_CHUNK_CHARS, cut between paragraphs (a
    heading line stays with the first piece); an over-long paragraph is cut between lines, then
    hard."""
    text = "\n".join(lines).strip()
    if not text:
        return []
    if len(text) <= MAX_CHUNK_CHARS:
        return [text]
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    units: list[str] = []
    for paragraph in paragraphs:
        if len(paragraph) <= MAX_CHUNK_CHARS:
            units.append(paragraph)
            continue
        for line in paragraph.split("\n"):
            while len(line) > MAX_CHUNK_CHARS:
                units.append(line[:MAX_CHUNK_CHARS])
                line = line[MAX_CHUNK_CHARS:]
            if line.strip():
                units.append(line)
    pieces: list[str] = []
    current = ""
    for unit in units:
        candidate = f"{current}\n\n{unit}" if current else unit
        if len(candidate) <= MAX_CHUNK_CHARS:
            current = candidate
        else:
            pieces.append(current)
            current = unit
    if current:
        pieces.append(current)
    # A heading alone says nothing: merge it into the piece that follows when it fits.
    if len(pieces) > 1 and _HEADING.match(pieces[0]) and "\n" not in pieces[0]:
        merged = f"{pieces[0]}\n{pieces[1]}"
        if len(merged) <= MAX_CHUNK_CHARS:
            pieces[:2] = [merged]
    return pieces
