"""The grounding readers made cheaper say exactly what they said before.

- `polarity._exclusion_matches` tries the combined exclusion pattern only where a candidate-first
  form (c6 X 已被排除, c7 X 不是根因, c9 X was ruled out) can start, and finds the other matches with
  the cue-first forms alone. It must return what `finditer` of the combined pattern returns (the
  oracle, as find_exclusions read it before): the same matches, in the same order, with the same
  spans and groups; and `find_exclusions` the exclusions the oracle's matches state.
- The readers keep their results per text: a caller that changes what it got back must not change
  what the next caller gets.
- `claim_features._take` blanks its matches by slicing instead of character by character.

Inputs: the exclusion sentences of test_grounding_lexicons, statements written like the verifier's,
and generated text built from every cue word, separators (clause breaks, the full stop before a space
or the end, spaces and newlines) and CJK / ASCII fillers, derandomized so CI sees the same examples.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.core.grounding import claim_features, key_terms, number_words, polarity
from shared.core.grounding.claim_features import extract
from shared.core.grounding.number_words import find_unaccepted_quantities, find_vague, find_word_quantities, normalise
from shared.core.grounding.polarity import (
    _C,
    _EXCLUSION,
    _EXCLUSION_HINT,
    _RELATION_NONE,
    EXCLUSION_PATTERNS,
    Exclusion,
    _exclusion_matches,
    _exclusions_of,
    find_absolutes,
    find_causal,
    find_exclusions,
    find_hedges,
    find_negations,
)
from shared.text_scan import Scan

# The combined pattern, read the way find_exclusions read it before: `finditer` over the whole text.
_ORACLE = re.compile("|".join(f"(?:{p})" for p in EXCLUSION_PATTERNS))


def _oracle_exclusions(text: str) -> list[Exclusion]:
    """find_exclusions over the oracle pattern (what it reads from the matches is unchanged)."""
    normal = normalise(text)
    if not _EXCLUSION_HINT.search(normal):
        return []
    return list(_exclusions_of(normal, _ORACLE.finditer(normal)))


def _shape(matches: list[re.Match[str]]) -> list[tuple[tuple[int, int], dict[str, str | None]]]:
    return [(m.span(), m.groupdict()) for m in matches]


def _assert_same(text: str) -> None:
    assert _shape(_exclusion_matches(text)) == _shape(list(_ORACLE.finditer(text))), text
    assert find_exclusions(text) == _oracle_exclusions(text), text


SENTENCES = [
    # test_grounding_lexicons: what is and what is not an exclusion
    "延迟升高与发布无关", "payment-service 的延迟与 db-01.prod 的连接池无关", "和配置变更没有关系", "与网络无关联",
    "不是配置变更导致的", "并非由网络抖动引起", "非代码缺陷所致", "不太可能是缓存导致", "不是因为 GC",
    "排除了数据库的可能性", "已排除磁盘问题", "磁盘已被排除", "网络不是根因", "发布不是本次故障的原因",
    "the latency is not related to the deploy", "not caused by redis", "ruled out the cache", "the deploy was ruled out",
    "不排除网络问题", "无法排除发布的影响", "排除故障后服务恢复", "连接池耗尽导致超时", "非常多的请求导致超时",
    # statements written like the verifier's, several forms in one text
    "payment-service 在 10:35 的 CPU 升高与 db-01 的慢查询无关，磁盘已被排除，网络不是根因。",
    "db-01.prod 的连接池已经被排除；发布并不是本次异常的根本原因，也不是由于配置变更导致的。",
    "the deploy was ruled out. redis is unrelated, and the cache is not the root cause.",
    "已排除磁盘问题, 网络抖动被排除. the gc pause has been ruled out; not due to the release",
    "order-service 的 http_5xx_rate 在 13:21 升高，根因可能是 deploy 变更「payment-api v2.3.1」，与数据库无关。",
    "磁盘 \n 已被排除", "网络   不是根因", "x已经被排除", "不已被排除", "网络。已被排除", "a. was ruled out",
    "同一时间的告警与本次故障之间并无关系", "与和跟同无关", "非常所致", "是非所致", "并非网络所致",
    "这个服务的连接池在高峰期间完全耗尽并且持续了很长时间所以它已被排除",  # a candidate beyond 30 characters
    "the very long description of a candidate cause that goes on and on was ruled out",
    "", "。", "已被排除", " was ruled out", "不是根因", "与无关",
]


# One sentence per form and cue word, each form alone (the forms left out when their words are absent).
FORM_SENTENCES = [
    *[f"{w}网络{r}" for w in "与和跟同" for r in _RELATION_NONE],
    *[f"{q}网络{v}的" for q in ("不是", "并非", "并不是", "不会是", "不可能是", "不太可能是", "绝非", "绝不是")
      for v in ("导致", "引起", "造成", "所致", "引发", "触发", "致使", "所导致")],
    "非网络所致", *[f"{q} 网络" for q in ("不是因为", "并非因为", "不是由于", "并非由于")], "排除了网络", "排除是网络原因",
    *[f"网络{q}" for q in ("已被排除", "已经被排除", "已排除", "可以排除", "可排除", "被排除")],
    *[f"网络{n}{t}{k}" for n in ("不是", "并不是", "并非") for t in ("", "本次", "此次", "这次", "本次故障的")
      for k in ("根因", "原因", "根本原因", "诱因", "主因", "问题所在")],
    *[f"{q} redis" for q in ("not related to", "unrelated to", "no relation to", "no relation with", "not caused by",
                             "not due to", "not the result of", "ruled out")],
    *[f"redis {q}" for q in ("was ruled out", "is ruled out", "has been ruled out", "were ruled out",
                             "have been ruled out", "is unrelated", "was unrelated", "is not the cause",
                             "was not the cause", "is not the root cause", "was not the root cause")],
]


@pytest.mark.parametrize("text", SENTENCES + FORM_SENTENCES)
def test_exclusions_match_the_combined_pattern(text):
    _assert_same(text)
    _assert_same(normalise(text))


def test_the_candidate_first_forms_are_as_written_before():
    """Naming their cues (_Q6, _Q7, _Q9, which `_exclusion_matches` looks for) left the three
    candidate-first forms as they were written."""
    assert EXCLUSION_PATTERNS[5] == rf"(?P<c6>{_C}{{1,30}}?)\s*(?<!不)(?P<q6>已被排除|已经被排除|已排除|可以排除|可排除|被排除)"
    assert EXCLUSION_PATTERNS[6] == (rf"(?P<c7>{_C}{{1,30}}?)\s*(?P<q7>(?:并?不是|并非)(?:本次|此次|这次)?(?:异常|故障|问题)?的?"
                                     r"(?:根因|原因|根本原因|诱因|主因|问题所在))")
    assert EXCLUSION_PATTERNS[8] == (rf"(?P<c9>{_C}{{1,40}}?)\s+(?P<q9>(?:was|is|has been|were|have been) ruled out|"
                                     r"is unrelated|was unrelated|(?:is|was) not the (?:root )?cause)")
    assert _EXCLUSION.pattern == _ORACLE.pattern


_CUES = [
    "与", "和", "跟", "同", "之间", "并", *_RELATION_NONE, "不是", "并非", "并不是", "不会是", "不可能是", "不太可能是",
    "绝非", "绝不是", "由", "因为", "由于", "所", "导致", "引起", "造成", "所致", "引发", "触发", "致使", "是", "绝",
    "非", "常", "不是因为", "并非因为", "不是由于", "并非由于", "不", "无法", "未", "不能", "难以", "无从", "尚未", "排除",
    "了", "的可能", "的可能性", "这一因素", "这因素", "因素", "原因", "已被排除", "已经被排除", "已排除", "可以排除",
    "可排除", "被排除", "本次", "此次", "这次", "异常", "故障", "问题", "的", "根因", "根本原因", "诱因", "主因",
    "问题所在", "not related to", "unrelated to", "no relation to", "no relation with", "not caused by", "not due to",
    "not the result of", "ruled out", "was", "is", "has been", "were", "have been", "is unrelated", "was unrelated",
    "is not the cause", "was not the root cause", "not the ", "root ", "cause",
]
_SEPARATORS = ["，", "。", "；", ";", ",", "!", "?", "！", "？", "\n", ". ", ".", " ", "  ", "\t", " \n "]
_FILLERS = ["网络", "发布", "数据库", "连接池", "磁盘", "慢查询", "服务", "x", "redis", "the deploy", "db-01.prod",
            "payment-service", "gc", "93.5%", "10:35", "a", "1", "-", "_", "「", "」", "（", "）"]
_TOKEN = st.sampled_from(_CUES + _SEPARATORS + _FILLERS)
_LONG_FILLER = st.integers(min_value=25, max_value=45).map(lambda n: "长" * n)


@settings(max_examples=1500, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_TOKEN, _TOKEN, _TOKEN, _LONG_FILLER), max_size=40).map("".join))
def test_generated_text_matches_the_combined_pattern(text):
    _assert_same(text)


@settings(max_examples=1500, derandomize=True, deadline=None)
@given(st.text(alphabet="与和不是并非根因原因已被排除可以 ruledoutwasinthec.,，。\n的了由导致所致无关", max_size=80))
def test_generated_characters_match_the_combined_pattern(text):
    _assert_same(text)


# --- kept results are never shared -----------------------------------------------------------------------

_STATEMENT = "db-01 的连接池与发布无关，磁盘已被排除；日志中没有 ERROR，均在 3000ms 内完成，可能由于慢查询导致三成请求超时，多次重试"


def test_a_caller_changing_its_list_does_not_change_the_next_callers():
    for read in (find_exclusions, find_negations, find_causal, find_hedges, find_absolutes, find_word_quantities,
                 find_vague, find_unaccepted_quantities):
        first = read(_STATEMENT)
        expected = list(first)
        first.clear()
        assert read(_STATEMENT) == expected, read.__name__
        assert read(_STATEMENT) is not read(_STATEMENT), read.__name__


def test_changing_extracted_features_does_not_change_the_next_extraction():
    first = extract(_STATEMENT)
    expected = (list(first.quantities), list(first.entities), list(first.codes), set(first.families),
                set(first.trend), set(first.state), first.causal)
    first.quantities.clear()
    first.entities.append("x")
    first.codes.clear()
    first.families.add("x")
    first.trend.add("x")
    first.state.clear()
    again = extract(_STATEMENT)
    assert (again.quantities, again.entities, again.codes, again.families, again.trend, again.state,
            again.causal) == expected


def test_a_text_too_long_to_keep_is_read_the_same():
    long_text = "，".join([_STATEMENT] * 150)
    assert len(long_text) > 10_000
    assert find_exclusions(long_text) == _oracle_exclusions(long_text)
    assert find_negations(long_text) == find_negations(long_text)
    assert extract(long_text).quantities == extract(long_text).quantities


# --- blanking by slices --------------------------------------------------------------------------------------

def _old_blank(text: str, spans: list[tuple[int, int]]) -> str:
    chars = list(text)
    for start, end in spans:
        for i in range(start, end):
            chars[i] = " "
    return "".join(chars)


def _scans() -> dict[str, Scan]:
    found = {f"{module.__name__.rsplit('.', 1)[1]}.{name}": value for module in (claim_features, number_words)
             for name, value in vars(module).items() if isinstance(value, Scan)}
    found.update({f"family {name}": scan for name, scan in claim_features._FAMILY_PATTERNS.items()})
    return found


_PATTERNS = [value for name, value in vars(claim_features).items()
             if name.startswith("_") and isinstance(value, re.Pattern)] + [scan.pattern for scan in _scans().values()]


@settings(max_examples=500, derandomize=True, deadline=None)
@given(st.lists(st.sampled_from(["http 503", "5xx", "ora-00600", "oomkilled", "java.lang.outofmemoryerror",
                                 "2026-12-01t10:35:00z", "10:35", "10.0.0.1", "db-01.prod.local", "payment-service-2",
                                 "http_5xx_rate", "93.5%", "3000 ms", "1,024", " ", "，", "错误", "x", "_", "-", "."]),
                max_size=30).map("".join))
def test_take_blanks_what_it_took(text):
    for pattern in _PATTERNS:
        found, rest = claim_features._take(pattern, text)
        assert rest == _old_blank(text, [m.span() for m in found])
        assert [m.span() for m in found] == [m.span() for m in pattern.finditer(text)]


# --- patterns skipped when what they need is absent -----------------------------------------------------

_SCAN_SAMPLES = [
    "http 503", "status: 502", "status_code=504", "状态码 500", "错误码500", "返回码 404", "code 500", "5xx", "4xx 错误",
    "ora-00600", "err-1234", "tns-12541", "pls-00201", "sqlstate 40001", "sqlstate-40001", "errno-111", "errno111",
    "oomkilled", "crashloopbackoff", "imagepullbackoff", "errimagepull", "evicted", "deadlineexceeded",
    "java.lang.outofmemoryerror", "timeoutexception", "2026-12-01t10:35:00z", "2026-12-01 10:35", "10:35:07",
    "10.0.0.1", "db-01.prod.local", "payment-service-2", "http_5xx_rate", "因为", "导致", "由于", "根因", "根本原因",
    "引起", "造成", "所致", "引发", "致使", "归因", "caused by", "due to", "because", "root cause", "results in",
    "resulted in", "result in", "led to", "lead to", "leads to", "triggered by", "cpu 93%", "full gc", "p99 延迟",
    "timed out", "连接池", "increase", "下降", "正常", "unhealthy",
    # number words: each reader's forms
    "一个半小时", "两个半钟头", "三成", "约三成半", "百分之三十", "三分之二", "5个百分点", "翻了一倍", "增加2倍", "3x",
    "three times as", "two times", "两三次", "三四成", "三十秒", "两次", "十几次", "几十个", "数千条", "上千条", "三十多次",
    "10余条", "二十来个", "数倍", "好几成", "几分钟", "若干小时", "hundreds of", "a few thousand", "成百上千", "多次",
    "significantly", "明显升高", "过半", "more than half", "doubled", "twice",
]


@pytest.mark.parametrize("text", _SCAN_SAMPLES)
def test_a_scan_needs_what_each_sample_it_matches_holds(text):
    for name, scan in _scans().items():
        if scan.pattern.search(text):
            assert any(need in text for need in scan.needs), (name, text)


@pytest.mark.parametrize("name", sorted(_scans()))
@settings(max_examples=150, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_scan_is_skipped_only_where_its_pattern_cannot_match(name, data):
    """`Scan` skips a text without any of its `needs`: every text its pattern matches holds one
    (texts generated from the pattern itself, and cut to the match's surroundings)."""
    scan = _scans()[name]
    text = data.draw(st.from_regex(scan.pattern))
    match = scan.pattern.search(text)
    assert match is not None
    assert any(need in text for need in scan.needs), (name, text)
    assert [m.span() for m in scan.finditer(text)] == [m.span() for m in scan.pattern.finditer(text)]
    assert scan.search(text) is not None


# --- word alternations with their lookbehind asked once, or only where a word can start ---------------------------------------------------

_OLD_EVENT_ENGLISH = re.compile("|".join(
    rf"(?<![a-z]){re.escape(e.rstrip('*'))}[a-z]*" if e.endswith("*") else rf"(?<![a-z]){re.escape(e)}(?:s|es|ed|d|ing)?(?![a-z])"
    for e in key_terms._ENGLISH_EVENT_FORMS))
_OLD_VAGUE = re.compile("|".join(rf"(?<![a-z]){re.escape(w)}(?![a-z])" if w.isascii() else re.escape(w)
                                 for w in sorted(number_words.VAGUE_QUANTIFIERS, key=len, reverse=True)))
_OLD_ABSENCE = re.compile(rf"(?<!有)(?<!是否)(?<!不是)(?<!并非)(?:{polarity.alternation(polarity.ABSENCE_CUES)})"
                          rf"(?!{polarity.alternation(polarity._NOT_ABSENCE_AFTER)})")
_WORDS = st.sampled_from([*(e.rstrip("*") for e in key_terms._ENGLISH_EVENT_FORMS), *number_words.VAGUE_QUANTIFIERS,
                          *polarity.ABSENCE_CUES, *polarity._NOT_ABSENCE_AFTER, "有", "是否", "不是", "并非",
                          "s", "es", "ed", "d", "ing", "x", "re", "un", " ", "-", "_", "1", "，", "明显", "升高"])


def test_the_vague_words_of_either_kind_start_differently():
    """What lets the Chinese and the English vague words be two alternations: no word of one kind
    can match where a word of the other starts."""
    assert all(not w[0].isascii() for w in number_words.VAGUE_QUANTIFIERS if not w.isascii())


@settings(max_examples=1000, derandomize=True, deadline=None)
@given(st.lists(_WORDS, max_size=12).map("".join))
def test_word_alternations_match_as_before(text):
    for new, old in ((key_terms._EVENT_ENGLISH, _OLD_EVENT_ENGLISH), (number_words._VAGUE, _OLD_VAGUE),
                     (polarity._ABSENCE, _OLD_ABSENCE)):
        assert [m.span() for m in new.finditer(text)] == [m.span() for m in old.finditer(text)], text
