"""The deterministic check of composed text: nothing may appear that the allowed material lacks.

Graph spec, "User-facing verifier outputs SHALL follow Composer-safe protocols", "REJECT produces
bounded output", "User-facing Chat answers SHALL remain readable Chinese".

Used twice:
- by the templates, to leave out a side line (hypothesis, recommended action, missing info, a
  quoted gap) whose numbers or names do not occur in the verified material;
- on a model composer's output, against the template rendering it was asked to rephrase (which
  already holds only allowed material). A section stating confirmed facts may only use terms of
  the template's confirmed sections, so a gap or a possibility cannot be moved into them. Any
  problem sends the composer back to the template.

Terms compared, after NFKC and case folding: numbers (by value: `92` and `92.0` are one),
ASCII identifiers and words (the parts of an allowed compound are allowed: `cpu_usage` -> `cpu`) (service and host names such as `payment-service`, tool names, metric
names, error names), citations `<tool> #<invocation>` and raw paths such as
`series[0].points[41]`. Key terms beyond identifiers (Chinese noun phrases, events such as 回滚/重启, versions, people) of a
model's rephrasing must also occur in the template's material (`unfounded_terms`). A model output is also refused for raw JSON, the removed executor fields
(`user_facing_answer` …), a section layout other than the template's, a causal assertion when the
material asserts no cause, and on REJECT any causal or root-cause sentence at all.

The first line (the direct answer) is ours: the model is never given it and the
templates put it back in front of whatever the model wrote. So that a rephrasing cannot contradict
it either, a model line may not state a direct answer of its own — an opening of the decision
table (是：, 证据不支持, 无法确认, 最可能的原因, 原因尚未由证据确认, 在所查范围内未发现异常, 发现异常)
or a verdict on health (健康, 排除, 一切正常, and their paraphrases: 没有异常, 运行正常, 均正常 …,
`shared.core.health_denials`) — unless the material it rephrases already says it.

While an evidence call of the run failed, no section may deny an anomaly or pass
a verdict on health in any wording, whatever the material says: the failed query is no ground for
it, so such a rephrasing sends the answer back to the template.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from shared.core.grounding.key_terms import key_terms, term_present
from shared.core.health_denials import denials

MAX_LINES_PER_SECTION = 20
# Sections that state confirmed facts (PASS: 结论, 依据; LOW_CONFID and REJECT: 已确认).
CONFIRMED_SECTIONS = frozenset({"结论", "依据", "已确认"})
MAX_LINE_CHARS = 400
# What only the first line may say (`shared.core.direct_answer.OPENINGS`), and verdicts on health.
ANSWER_PHRASES = (
    "是：", "证据不支持", "无法确认", "最可能的原因", "原因尚未由证据确认", "未发现异常", "发现异常",
    "健康", "排除", "一切正常",
)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_WORD = re.compile(r"[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)*")
_CITATION = re.compile(r"([a-z][a-z_]*)\s*#\s*(\d+)")
_RAW_PATH = re.compile(r"[a-z_]+\[\d+\](?:\.[a-z_]+(?:\[\d+\])?)*")
_PARTS = re.compile(r"[-_.]")
REMOVED_FIELDS = ("user_facing_answer", "diagnosis_summary", "answer_version", "executor_evidence_v2")
_JSONISH = re.compile(r"[{}]|\"\s*:|\[\s*\"|\"\s*\]")
CAUSAL = re.compile(
    r"因为|导致|由于|根因|根本原因|引起|造成|所致|引发|致使|归因|罪魁"
    r"|(?<![a-z])(?:caused by|due to|because|root cause|result(?:s|ed)? in|led to|leads? to|triggered by)(?![a-z])",
    re.IGNORECASE,
)


def _normal(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def _number(token: str) -> str:
    value = float(token)
    return str(int(value)) if value.is_integer() else repr(value)


@dataclass
class Terms:
    numbers: set[str] = field(default_factory=set)
    words: set[str] = field(default_factory=set)
    citations: set[tuple[str, str]] = field(default_factory=set)
    raw_paths: set[str] = field(default_factory=set)
    causal: bool = False

    def add(self, text: str) -> None:
        normal = _normal(text)
        self.numbers |= {_number(n) for n in set(_NUMBER.findall(normal))}
        words = set(_WORD.findall(normal))
        # The parts of a compound name are allowed on their own (`cpu_usage` allows `cpu`); a
        # compound the material lacks (`order-service`) is still compared as a whole. (A word
        # without a separator is its own only part.)
        self.words |= words | {part for word in words if not word.isalnum()
                               for part in _PARTS.split(word) if part}
        # A citation holds `#`, a raw path `[`: a text without them is not scanned for either.
        if "#" in normal:
            self.citations |= {(tool, number) for tool, number in _CITATION.findall(normal)}
        if "[" in normal:
            self.raw_paths |= set(_RAW_PATH.findall(normal))
        self.causal = self.causal or bool(CAUSAL.search(normal))


def terms_of(texts: Sequence[str]) -> Terms:
    terms = Terms()
    for text in texts:
        terms.add(text)
    return terms


def ungrounded(text: str, allowed: Terms) -> list[str]:
    """The numbers, names, citations and raw paths of `text` that `allowed` does not contain."""
    found = terms_of([text])
    missing = [f"number {n}" for n in sorted(found.numbers - allowed.numbers)]
    missing += [f"name {w}" for w in sorted(found.words - allowed.words)]
    missing += [f"citation {t} #{n}" for t, n in sorted(found.citations - allowed.citations)]
    missing += [f"raw path {p}" for p in sorted(found.raw_paths - allowed.raw_paths)]
    return missing


def unfounded_terms(text: str, allowed_text: str) -> list[str]:
    """Key terms of `text` (noun phrases, events, versions, people — `shared.core.grounding.key_terms`)
    that `allowed_text` lacks: a model's rephrasing may reorder the material, never add to it."""
    return [f"{term.kind} {term.text}" for term in key_terms(text) if not term_present(term, allowed_text)]


def raw_material_problems(text: str) -> list[str]:
    """Raw JSON or removed executor fields: never part of a user-facing answer."""
    normal = _normal(text)
    problems = [f"names the removed field {name}" for name in REMOVED_FIELDS if name in normal]
    if _JSONISH.search(text):
        problems.append("contains raw JSON")
    return problems


def check_composed(
    sections: Sequence[tuple[str, Sequence[str]]],
    template_sections: Mapping[str, Sequence[str]],
    verdict: str,
    *,
    failed: bool = False,
) -> list[str]:
    """Problems of a composed answer against the template sections it rephrases (empty: it may
    be shown). Sections that state confirmed facts (CONFIRMED_SECTIONS) may only use terms of
    the template's confirmed sections, so unconfirmed material cannot move into them. `failed`:
    an evidence call of the run failed and no recovery closed it — nothing may be denied."""
    problems: list[str] = []
    titles = [title for title, _ in sections]
    if titles != list(template_sections):
        problems.append(f"sections {titles} differ from the template's {list(template_sections)}")
    everything = terms_of([line for lines in template_sections.values() for line in lines])
    everything_text = "\n".join(line for lines in template_sections.values() for line in lines)
    confirmed_text = "\n".join(line for t, lines in template_sections.items() if t in CONFIRMED_SECTIONS for line in lines)
    confirmed = terms_of([line for t, lines in template_sections.items() if t in CONFIRMED_SECTIONS for line in lines])
    lines: list[str] = []
    for title, section_lines in sections:
        if not section_lines or len(section_lines) > MAX_LINES_PER_SECTION:
            problems.append(f"section {title} has {len(section_lines)} lines")
        kept = [line for line in section_lines if isinstance(line, str) and line.strip() and len(line) <= MAX_LINE_CHARS]
        if len(kept) != len(section_lines):
            problems.append(f"section {title} has a blank or over-long line")
        missing = ungrounded("\n".join(kept), confirmed if title in CONFIRMED_SECTIONS else everything)
        missing += unfounded_terms("\n".join(kept), confirmed_text if title in CONFIRMED_SECTIONS else everything_text)
        if missing:
            problems.append(f"section {title}: not in the allowed material: " + ", ".join(missing[:6]))
        lines += kept
    text = "\n".join(lines)
    problems += raw_material_problems(text)
    said = _normal(everything_text)
    problems += [f"states a direct answer ({phrase}): the first line is the system's"
                 for phrase in ANSWER_PHRASES if _normal(phrase) in _normal(text) and _normal(phrase) not in said]
    for title, section_lines in sections:
        for phrase in dict.fromkeys(p for line in section_lines if isinstance(line, str) for p in denials(line)):
            if failed:
                problems.append(f"section {title} denies an anomaly ({phrase}) while an evidence call failed")
            elif _normal(phrase) not in said:
                problems.append(f"section {title} passes a verdict on health ({phrase}) the material does not state")
    if verdict == "REJECT" and CAUSAL.search(text):
        problems.append("a REJECT answer states a cause or root cause")
    elif CAUSAL.search(text) and not everything.causal:
        problems.append("states a cause the allowed material does not state")
    return problems
