"""Versioned prompt files (DESIGN §5, STYLE "Agents, prompts and tools").

A role keeps its prompts next to its code, one file per prompt, named `<name>.v<version>.md`.
Optional front matter between `---` lines holds flat `key: value` fields; `name` and `version`
there must agree with the file name, other fields (e.g. a short follow-up instruction) are
exposed as `Prompt.fields`. The audit records `name` and `version` only, never the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from shared.core.contracts import PromptRef

_FILE_NAME = re.compile(r"^(?P<name>[a-z0-9_]+)\.v(?P<version>[0-9]+)\.md$")
_FRONT_MATTER_LINE = re.compile(r"^(?P<key>[a-z_][a-z0-9_]*):[ \t]*(?P<value>.*)$")


class PromptError(ValueError):
    """A prompt file is missing or inconsistent."""


@dataclass(frozen=True)
class Prompt:
    name: str
    version: str
    text: str
    fields: dict[str, str] = field(default_factory=dict)

    def ref(self, role: str) -> PromptRef:
        return PromptRef(role=role, name=self.name, version=self.version)


def _split_front_matter(raw: str, path: Path) -> tuple[dict[str, str], str]:
    lines = raw.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, raw
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise PromptError(f"{path.name}: front matter is not closed by '---'") from None
    values: dict[str, str] = {}
    for line in lines[1:end]:
        if not line.strip():
            continue
        match = _FRONT_MATTER_LINE.match(line)
        if match is None:
            raise PromptError(f"{path.name}: front matter line is not 'key: value': {line[:60]!r}")
        values[match.group("key")] = match.group("value").strip()
    return values, "\n".join(lines[end + 1:])


def read_prompt_file(path: Path) -> Prompt:
    match = _FILE_NAME.match(path.name)
    if match is None:
        raise PromptError(f"{path.name}: a prompt file is named <name>.v<version>.md")
    values, body = _split_front_matter(path.read_text(encoding="utf-8"), path)
    name, version = match.group("name"), match.group("version")
    for key, expected in (("name", name), ("version", version)):
        if key in values and values.pop(key) != expected:
            raise PromptError(f"{path.name}: front matter {key} disagrees with the file name ({expected})")
    text = body.strip()
    if not text:
        raise PromptError(f"{path.name}: the prompt is empty")
    return Prompt(name=name, version=version, text=text, fields=values)


def load_prompt(directory: Path, name: str) -> Prompt:
    """`name` is `<name>` (its highest version) or `<name>.v<version>` (that version)."""
    pinned = re.fullmatch(r"(?P<name>[a-z0-9_]+)\.v(?P<version>[0-9]+)", name)
    if pinned:
        path = Path(directory) / f"{name}.md"
        if not path.is_file():
            raise PromptError(f"no prompt file {path.name} in {directory}")
        return read_prompt_file(path)
    versions = [
        (int(m.group("version")), path)
        for path in Path(directory).glob(f"{name}.v*.md")
        if (m := _FILE_NAME.match(path.name)) and m.group("name") == name
    ]
    if not versions:
        raise PromptError(f"no prompt named {name!r} in {directory}")
    return read_prompt_file(max(versions)[1])
