"""Tokens for knowledge search, in Chinese and English alike.

Chinese runs are segmented by jieba in search mode (a word and its shorter words: 数据库连接池 →
数据, 数据库, 连接, 连接池), ASCII runs are lower-cased identifiers kept whole and split into
their parts (cpu_usage_percent → cpu_usage_percent, cpu, usage, percent; OOMKilled → oomkilled).
Function words carry no topic and are dropped. The same function tokenizes documents and queries.
"""

from __future__ import annotations

import logging
import re
import threading

import jieba

_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_ASCII_WORD = re.compile(r"[a-z0-9]+(?:[._\-/][a-z0-9]+)*")
_PART = re.compile(r"[a-z]+|\d+[a-z]*")

# Particles, pronouns and question words: frequent in questions and prose, never the topic.
_CJK_STOP = frozenset(
    "的 了 是 在 和 与 及 或 也 都 就 还 又 被 把 对 从 向 为 以 并 而 但 若 如 则 等 个 这 那 其 之 于 该 此 吗 呢 吧 啊 呀 么"
    " 我 你 他 她 它 我们 你们 他们 什么 怎么 怎样 如何 为什么 为何 哪些 哪个 是否 是不是 有没有 一下 一个 一些 可以 可能"
    " 需要 进行 通过 如果 因为 所以 然后 以及 或者 以上 以下 时候 这个 那个 这么 那么 现在 目前 最近 刚才 今天 昨天".split()
)
_ASCII_STOP = frozenset(
    "a an the of to in on at by for with from and or not no is are was were be been it its this that"
    " these those what why how when where which who do does did has have had can could should would"
    " will i we you he she they me my our your please".split()
)

_lock = threading.Lock()
_ready = False


def _ensure_jieba() -> None:
    """jieba builds its dictionary on first use; do it once, quietly, under a lock."""
    global _ready
    if _ready:
        return
    with _lock:
        if not _ready:
            jieba.setLogLevel(logging.WARNING)
            jieba.initialize()
            _ready = True


def tokenize(text: str) -> list[str]:
    """Search tokens of `text`, in order (repeats kept: term frequency matters to BM25)."""
    _ensure_jieba()
    lowered = text.lower()
    tokens: list[str] = []
    position = 0
    for match in _CJK_RUN.finditer(lowered):
        tokens += _ascii_tokens(lowered[position:match.start()])
        tokens += [w for w in jieba.lcut_for_search(match.group(0)) if w.strip() and w not in _CJK_STOP]
        position = match.end()
    tokens += _ascii_tokens(lowered[position:])
    return tokens


def _ascii_tokens(text: str) -> list[str]:
    tokens: list[str] = []
    for match in _ASCII_WORD.finditer(text):
        word = match.group(0)
        parts = _PART.findall(word)
        if word not in _ASCII_STOP and (len(word) > 1 or word.isdigit()):
            tokens.append(word)
        if len(parts) > 1:
            tokens += [p for p in parts if p not in _ASCII_STOP and len(p) > 1]
    return tokens
