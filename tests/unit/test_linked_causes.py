"""Causes linked and ordered: identifiers a change and a line share (also when one contains the
other), a new kind of line after a change, a cause that never follows its effect, an onset read
where the series jumps, and yes/no hypotheses answered about the thing or the change they name.

Every name here is made up for the test: the rules read shapes, times and the failure-mode
catalogue, never an estate's names.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from shared.core.change_point import find_onset
from shared.core.contracts import ToolInvocation
from shared.core.direct_answer import ABNORMAL, CAUSE, CHANGE, NORMAL, first_line, make_finding
from shared.core.evidence_facts import ref_facts
from shared.core.grounding.causal_link import (
    NEW_KIND_AFTER_CHANGE_MIN,
    Corpus,
    LinkEnd,
    check_link,
    shared_identifiers,
)
from shared.core.question_intent import classify_question

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
# Background lines: enough distinct groups that a token in one or two of them is rare.
BACKGROUND = [f"worker-{k} heartbeat shard{k} ok lag={k}ms" if k % 2 else f"GET /v1/items/{k} 200 {k}ms" for k in range(12)]
BACKGROUND += [f"{word} cycle finished in {k}s" for k, word in enumerate(["compaction", "rotation", "snapshot", "sweep"])]


def _corpus(*texts: str) -> Corpus:
    return Corpus.of([*BACKGROUND, *texts], ["quill-api"])


def _at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


# --- identifiers a change and a line share -----------------------------------------------------


@pytest.mark.parametrize(
    ("change", "line", "change_token", "line_token"),
    [
        # a config key and a thread named after the feature it tunes
        ("quill-api 配置变更：ledger.sweep.parallelism 2 -> 24", "[ledger-sweep-7] c.x.SweepTask - slow statement 3100ms",
         "ledger.sweep.parallelism", "ledger-sweep-7"),
        # a phrase of the summary and a flag that spells it with separators
        ("quill-api 发布 v8.1.0：启用 tally v3", 'msg="flag on" flag=orders.tally_v3 rollout=100', "tally v3", "orders.tally_v3"),
        # the same key, once as `key=value` nested in another pair
        ("quill-api 配置变更：spool.purge.enabled true -> false", "purge skipped reason=spool.purge.enabled=false",
         "spool.purge.enabled", "spool.purge.enabled"),
        # a feature named in Chinese by both
        ("quill-api 发布 v2.0.4：新增 票据本地索引", "[idx] 票据本地索引条目持续增长 size=120000", "票据本地索引", "票据本地索引"),
    ],
)
def test_a_change_and_a_line_naming_one_thing_share_an_identifier(change, line, change_token, line_token):
    matches = shared_identifiers(change, [line], _corpus(change, line))
    assert (change_token, line_token) in {(m.change, m.signature) for m in matches}


@pytest.mark.parametrize(
    ("change", "line"),
    [
        # one common word is vocabulary, not an identifier
        ("quill-api 配置变更：cache.size 100 -> 200", "[ledger-cache] refresh slow 3100ms"),
        # a version and an unrelated path segment with digits
        ("quill-api 发布 v4.2.0：文案调整", "GET /static/v4/logo.png 404"),
    ],
)
def test_a_shared_word_or_number_is_no_identifier(change, line):
    assert shared_identifiers(change, [line], _corpus(change, line)) == []


def test_an_identifier_every_group_holds_is_not_distinctive():
    change = "quill-api 配置变更：shard.map.version 3 -> 4"
    crowded = [f"{line} shard-map" for line in BACKGROUND]
    corpus = Corpus.of([*crowded, change], ["quill-api"])
    assert shared_identifiers(change, [crowded[0]], corpus) == []


# --- a new kind of line after a change ---------------------------------------------------------


def _signature(minutes: float, *, first: bool = True, read_from: float = -40) -> LinkEnd:
    return LinkEnd("signature", "ledger balance step took 2400ms", _at(minutes), "quill-api",
                   first_of_kind=first, read_from=_at(read_from))


RELEASE = LinkEnd("change", "quill-api 发布 v5.0.0：结算前逐条校验", _at(0), "quill-api")
ONSET = LinkEnd("onset", "queue depth onset", _at(4), "quill-api")


def test_a_new_kind_of_line_soon_after_a_change_links_it():
    link = check_link([RELEASE, _signature(3), ONSET], _corpus(RELEASE.text, "ledger balance step took 2400ms"))
    assert link.linked and link.kind == "change" and "new kind" in link.detail


def test_a_routine_warning_before_the_change_does_not_hide_the_new_kind_after_it():
    # No onset cited: the read around the release holds a routine warning from before it and the
    # new kind of line after it; the warning is no effect of the release and no reason to refuse.
    routine = LinkEnd("signature", "duplicate message ignored offset=4711", _at(-12), "quill-api",
                      first_of_kind=True, read_from=_at(-20))
    novel = _signature(3, read_from=-20)
    link = check_link([RELEASE, routine, novel], _corpus(RELEASE.text, routine.text, novel.text))
    assert link.linked and link.kind == "change" and "new kind" in link.detail
    # the same warning, continuing after the release, is no new kind: nothing links
    assert not check_link([RELEASE, routine, _signature(3, first=False, read_from=-20)],
                          _corpus(RELEASE.text, routine.text, novel.text)).linked


@pytest.mark.parametrize(
    ("signature", "why"),
    [
        (_signature(3, first=False), "the line was seen before the change"),
        (_signature(3, read_from=-5), "the read does not cover the time before the change"),
        (_signature(NEW_KIND_AFTER_CHANGE_MIN + 2), "the line starts long after the change"),
        (_signature(6), "the line starts after the onset it would explain"),
    ],
)
def test_a_line_that_is_not_new_or_not_first_does_not_link_a_change(signature, why):
    link = check_link([RELEASE, signature, ONSET], _corpus(RELEASE.text, signature.text))
    assert not link.linked, why


def test_an_error_that_starts_after_the_onset_is_not_its_cause():
    error = LinkEnd("signature", "upstream reset", _at(7), "quill-api")
    onset = LinkEnd("onset", "5xx onset", _at(4), "quill-api")
    assert not check_link([error, onset], _corpus("upstream reset")).linked
    assert check_link([LinkEnd("signature", "upstream reset", _at(3), "quill-api"), onset], _corpus("upstream reset")).linked


def _logs(messages: list[tuple[float, str]], *, total: int | None = None, start: float = -30) -> ToolInvocation:
    stamps = [(_at(m)).strftime("%Y-%m-%dT%H:%M:%SZ") for m, _ in messages]
    projection = {
        "tool": "query_logs", "service": "quill-api", "level": ["ERROR", "WARN"], "contains": None,
        "start": _at(start).strftime("%Y-%m-%dT%H:%M:%SZ"), "end": _at(30).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "total_matches": total if total is not None else len(messages), "returned": len(messages),
        "hits": [{"ts": ts, "level": "WARN", "host": "h1", "message": text} for ts, (_, text) in zip(stamps, messages)],
        "summary": "query_logs",
    }
    return ToolInvocation(
        invocation_id=1, run_id="r", tool_call_id="t1", tool_name="query_logs", lifecycle="READY",
        evidence_status="EVIDENCE_FOUND", request={"service": "quill-api"}, agent_result=json.dumps(projection),
        retrieval_details={"evidence_refs": []},
    )


def test_the_first_line_of_its_kind_in_a_complete_read_is_marked_so():
    read = _logs([(-20, "GET /v1/items/7 took 12ms"), (2, "ledger step took 2400ms"), (5, "ledger step took 2210ms")])
    assert [ref_facts(read, f"hits[{k}]").first_of_kind for k in range(3)] == [True, True, False]
    facts = ref_facts(read, "hits[1]")
    assert facts.window_start == _at(-30).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_line_after_a_gap_in_the_read_is_never_the_first_of_its_kind():
    # 10 of 40 matching lines: the oldest 5 and the newest 5; what lies between was not seen.
    lines = [(k, f"kind{k % 2} event") for k in range(5)] + [(25 + k, "late kind event") for k in range(5)]
    read = _logs(lines, total=40)
    assert ref_facts(read, "hits[0]").first_of_kind
    assert not ref_facts(read, "hits[5]").first_of_kind


# --- where an onset is read ------------------------------------------------------------------


def test_a_noisy_baselines_lone_uptick_is_not_where_a_jump_starts():
    baseline = [0.10, 0.07, 0.12, 0.09, 0.11, 0.08, 0.10, 0.06, 0.13, 0.09, 0.10, 0.08, 0.11, 0.09, 0.10, 0.07,
                0.17, 0.15, 0.12, 0.19, 0.20, 0.11, 0.27, 0.14]
    jump = [4.1, 12.0, 12.0, 12.9, 12.8, 12.5, 12.6, 12.4, 12.7, 12.5]
    onset = find_onset(baseline + jump, direction="up")
    assert onset is not None and onset.index == len(baseline)


# --- the question answered -------------------------------------------------------------------

LINKED = make_finding("quill-api 在 T0 的 deploy 变更「发布 v5.0.0」很可能是 queue_depth 升高的原因：变更后才开始出现的 WARN 日志。",
                      " [证据: query_changes #3 changes[0]；query_logs #2 hits[3]]", CAUSE, True)
EVENT_CAUSE = make_finding("ERROR 日志「upstream reset」很可能是 quill-api 的 http_5xx_rate 升高的直接原因。",
                           " [证据: query_logs #2 hits[1]；query_metrics #1 series[0].onset]", CAUSE, True)
A_CHANGE = make_finding("quill-api 在 T0 有一次 deploy 变更：「发布 v5.0.0」。", " [证据: query_changes #3 changes[0]]", CHANGE, True)
NO_CHANGE = make_finding("quill-api 在 T0 至 T9 期间没有变更记录（0 change records）。", " [证据: query_changes #3 summary]",
                         NORMAL, True)
LAG = make_finding("quill-api 的 queue_depth 在 T5 达到 9000。", " [证据: query_metrics #1 series[0].points[5]]", ABNORMAL, True)
CHANGE_QUESTION = "quill-api 消息积压是不是新版本发布导致的？"


@pytest.mark.parametrize(
    ("findings", "verdict", "opening", "names"),
    [
        ([LAG, LINKED], "PASS", "是：", "v5.0.0"),
        ([LAG, LINKED], "REJECT", "无法确认：", ""),
        ([LAG, EVENT_CAUSE, A_CHANGE], "PASS", "无法确认：", "v5.0.0"),
        ([LAG, NO_CHANGE], "PASS", "证据不支持：", "没有变更记录"),
        ([LAG], "PASS", "无法确认：", "变更记录"),
    ],
)
def test_a_change_hypothesis_is_answered_about_the_change(findings, verdict, opening, names):
    intent = classify_question(CHANGE_QUESTION)
    assert intent.kind == "yes_no" and intent.hypothesis_change
    line = first_line(intent, CHANGE_QUESTION, findings, verdict)
    assert line.startswith(opening) and names in line


THREADS = make_finding("quill-api 在 T1 至 T9 期间多次出现 ERROR 日志：「java.util.concurrent.RejectedExecutionException: "
                       "Task rejected from worker pool」。", " [证据: query_logs #2 hits[0]]", ABNORMAL, True)
DB_POOL = make_finding("quill-api 在 T1 至 T9 期间多次出现 ERROR 日志：「HikariPool-1 - Connection is not available, "
                       "request timed out after 30000ms.」。", " [证据: query_logs #2 hits[1]]", ABNORMAL, True)


@pytest.mark.parametrize(
    ("question", "findings", "opening", "names"),
    [
        ("quill-api 报错很多，是数据库连接池的问题吗？", [THREADS], "证据不支持：", "线程池"),
        ("quill-api 报错很多，是数据库连接池的问题吗？", [DB_POOL], "是：", "数据库连接池"),
        ("quill-api 是不是 Redis 连接池满了？", [DB_POOL], "证据不支持：", "实际"),
        ("quill-api 是不是线程池打满了？", [THREADS, DB_POOL], "是：", "线程池"),
    ],
)
def test_a_pool_hypothesis_is_answered_about_that_pool(question, findings, opening, names):
    line = first_line(classify_question(question), question, findings, "PASS")
    assert line.startswith(opening) and names in line


# --- a change that names a setting of the anomaly's own failure mode ---------------------------


def _onset(metric: str, minutes: float) -> LinkEnd:
    return LinkEnd("onset", f"{metric} onset", _at(minutes), "quill-api", metric)


@pytest.mark.parametrize(
    ("summary", "metric", "linked"),
    [
        ("quill-api 配置变更：pricing.quote.expire_after 1800 -> 2", "quill_cache_hit_ratio", True),
        ("quill-api 配置变更：db.maximumPoolSize 50 -> 5", "hikaricp_connections_pending", True),
        ("quill-api 配置变更：ui.banner_text 更新", "quill_cache_hit_ratio", False),  # names no setting of it
        ("quill-api 配置变更：pricing.quote.expire_after 1800 -> 2", "process_cpu_usage_percent", False),  # another mode
    ],
)
def test_a_change_naming_a_setting_of_the_anomalys_failure_mode_links_it(summary, metric, linked):
    change = LinkEnd("change", summary, _at(0), "quill-api")
    link = check_link([change, _onset(metric, 3)], _corpus(summary))
    assert link.linked is linked


def test_a_setting_changed_long_before_the_onset_is_not_linked_by_its_mode():
    change = LinkEnd("change", "quill-api 配置变更：pricing.quote.expire_after 1800 -> 2", _at(-90), "quill-api")
    assert not check_link([change, _onset("quill_cache_hit_ratio", 3)], _corpus(change.text)).linked


# --- an error share written as 0..1 -------------------------------------------------------------


def test_an_error_ratio_already_high_is_read_as_the_share_it_is():
    """0.45 of requests failing is 45 %: the executor judges a `ratio` series by the same level the
    verifier applies to it read as a percentage (it never calls such a series quiet)."""
    from shared.core.metric_anomaly import assess_series

    high = [0.44, 0.46, 0.45, 0.47, 0.43, 0.45] * 10
    assert assess_series("quill_http_error_ratio", "ratio", high).anomaly is not None
    low = [0.001, 0.002, 0.001, 0.0015] * 15
    assert assess_series("quill_http_error_ratio", "ratio", low).anomaly is None
