"""What a hypothesis blames, read right and answered about: a host or service (「是 pay.internal 不可用
的问题吗」), a kind of change (a schema migration is no release), a thing the catalogue types (a crash
is shown by its own line); the pieces an answer quotes for it (the other end of a failing call, a
line's message without its prefix, a series named in a cause); and a resource that runs out
before the symptom it causes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.executor.embedded_wording import bounded_summary
from services.executor.excerpt_choice import decisive_excerpt, named_peer
from services.gatekeeper.evidence_snapshot import SnapshotBuilder
from services.gatekeeper.tool_projections import ParsedProjection
from shared.core.contracts import EvidenceRef, ToolInvocation
from shared.core.direct_answer import ABNORMAL, CAUSE, NOT_SUPPORTED, YES, first_line, make_finding
from shared.core.grounding.causal_link import Corpus, LinkEnd, check_link, resource_link, saturable
from shared.core.grounding.statement_check import _MAX_WORDS
from shared.core.metric_anomaly import assess_series
from shared.core.question_intent import change_kind_named, classify_question

# --- the question ---------------------------------------------------------------------------


@pytest.mark.parametrize(("query", "blamed"), [
    ("zhei 的任务失败数变多，是 brianrek.internal 不可用的问题吗？", ("brianrek.internal",)),
    ("frontend 的 5xx 比例升高，是 ledger-api 挂了的问题吗？", ("ledger-api",)),
    ("checkout-api 报错，是不是 payment-service 的问题？", ("payment-service",)),
])
def test_a_host_or_service_in_the_hypothesis_is_what_it_blames(query, blamed):
    intent = classify_question(query)
    assert intent.kind == "yes_no"
    assert intent.hypothesis_services == blamed


@pytest.mark.parametrize("query", ["checkout-api 是不是挂了？", "checkout-api 报错很多，是数据库连接池的问题吗？"])
def test_the_one_service_a_question_names_stays_its_subject(query):
    assert classify_question(query).hypothesis_services == ()


def test_a_file_name_or_a_version_is_no_host():
    assert classify_question("cart-api 报错，是不是 settings.yaml 改坏了？").hypothesis_services == ()
    assert classify_question("cart-api 变慢，是不是 v2.3.1 导致的？").hypothesis_services == ()


@pytest.mark.parametrize(("hypothesis", "kind"), [
    ("是不是数据库迁移导致的", "migration"),
    ("是 schema migration 的问题吗", "migration"),
    ("是不是新版本导致的", "release"),
    ("是不是配置变更导致的", "config"),
])
def test_a_change_hypothesis_names_its_kind(hypothesis, kind):
    assert change_kind_named(hypothesis) == kind


def test_a_migration_hypothesis_is_a_change_hypothesis():
    assert classify_question("zial 的数据库查询耗时变长，是数据库迁移的问题吗？").hypothesis_change


def test_network_instability_in_other_words_is_still_the_network():
    intent = classify_question("doth-service 偶发报错，是不是网络不稳定导致的？")
    assert intent.kind == "yes_no"


# --- the first line ------------------------------------------------------------------------

_LINE = "ledger 在 T1 至 T2 期间多次出现 ERROR 日志：「job x-export failed」（调用对象 brianrek.internal）。"


def test_yes_when_a_confirmed_anomaly_names_the_blamed_host():
    intent = classify_question("ledger 的任务失败数变多，是 brianrek.internal 不可用的问题吗？")
    line = first_line(intent, "", [make_finding(_LINE, " [证据: l #2]", ABNORMAL, True, ["query_logs"])], "PASS")
    assert line.startswith(YES) and "brianrek.internal" in line


def test_no_yes_for_a_blamed_host_no_anomaly_names():
    intent = classify_question("ledger 的任务失败数变多，是 other.internal 不可用的问题吗？")
    line = first_line(intent, "", [make_finding(_LINE, " [证据: l #2]", ABNORMAL, True, ["query_logs"])], "PASS")
    assert not line.startswith(YES)


def test_no_yes_for_a_blamed_host_under_reject():
    intent = classify_question("ledger 的任务失败数变多，是 brianrek.internal 不可用的问题吗？")
    line = first_line(intent, "", [make_finding(_LINE, " [证据: l #2]", ABNORMAL, True, ["query_logs"])], "REJECT")
    assert not line.startswith(YES)


def test_a_release_question_is_not_answered_yes_by_a_linked_migration():
    intent = classify_question("ledger 查询这么慢，是不是新版本导致的？")
    cause = make_finding("ledger 在 T1 的 migration 变更「删除索引 idx_a」很可能是 q_p99 升高的原因：……",
                         " [证据: c #3]", CAUSE, True, ["query_changes", "query_logs"])
    line = first_line(intent, "", [cause], "PASS")
    assert line.startswith(NOT_SUPPORTED) and "migration" in line


def test_a_crash_is_shown_by_its_own_line_before_the_restart_count():
    intent = classify_question("veth-gw 的重启次数变多，是进程崩溃的问题吗？")
    restarts = make_finding("veth-gw 的 brei_container_restarts_total 在 T1 达到 5，高于窗口前段的 0。", " [证据: m #1]",
                            ABNORMAL, True, ["query_metrics"])
    panic = make_finding("veth-gw 在 T1 至 T2 期间多次出现 FATAL 日志：「panic: runtime error: nil pointer dereference」。",
                         " [证据: l #2]", ABNORMAL, True, ["query_logs"])
    line = first_line(intent, "", [restarts, panic], "PASS")
    assert line.startswith(YES) and "panic" in line


def test_the_word_a_hypothesis_uses_is_read_whole_next_to_chinese():
    # 「panic的问题吗」: the catalogue reads `panic`, so the finding quoting it is the one shown,
    # not a back-off warning about the same restarts.
    intent = classify_question("veth-gw 的重启次数变多，是程序 panic的问题吗？")
    back_off = make_finding("veth-gw 在 T1 至 T2 期间多次出现 WARN 日志：「Back-off restarting failed container」。",
                            " [证据: l #1]", ABNORMAL, True, ["query_logs"])
    panic = make_finding("veth-gw 在 T1 至 T2 期间多次出现 FATAL 日志：「panic: runtime error: nil pointer dereference」。",
                         " [证据: l #2]", ABNORMAL, True, ["query_logs"])
    line = first_line(intent, "", [back_off, panic], "PASS")
    assert line.startswith(YES) and "panic" in line


@pytest.mark.parametrize("query", ["vorn-service 和 zelkam 的报错是同一个问题吗？", "zelkam 和 vorn-service 的报错是同一个问题吗？"])
def test_a_one_word_service_joined_to_a_named_one_is_a_service_of_the_question(query):
    intent = classify_question(query)
    assert intent.kind == "yes_no"
    assert set(intent.subject_services) == {"vorn-service", "zelkam"}
    assert intent.hypothesis_services == ("zelkam",)


# --- what the answer quotes ----------------------------------------------------------------


@pytest.mark.parametrize(("line", "peer"), [
    ("NoValidConnectionsError: [Errno None] Unable to connect to port 22 on brem.prod.local", "brem.prod.local"),
    ('{"msg":"job a-export failed","target":"diam.svc.cluster.local","attempt":2}', "diam.svc.cluster.local"),
    ("HTTPError: 503 Service Unavailable from https://zz.partner.example.com/upload", "zz.partner.example.com"),
    ("java.net.ConnectException: Connection refused: ledger-api/10.1.2.3:9090", "ledger-api"),
    ("slow call to quote-gw dependency=quote-gw took_ms=4000", "quote-gw"),
    ("client closed connection early peer=10.91.121.224", None),  # an address is no peer to name
    ('{"host":"web-7f9c-1","msg":"request failed"}', None),  # the line's own instance
    ("ERROR java.lang.IllegalStateException: pool closed", None),
    ("java.net.ConnectException: refused\n\tat java.base/sun.nio.ch.Net.connect0(Native Method)", None),  # a stack frame
])
def test_the_other_end_of_a_failing_call(line, peer):
    assert named_peer(line, ("self-svc",)) == peer


def test_the_line_s_own_service_is_no_peer():
    assert named_peer("call to ledger-api failed upstream=ledger-api", ("ledger-api",)) is None


@pytest.mark.parametrize(("line", "quote"), [
    ("ERROR [grpc-default-executor-42] pay.client - TLS handshake with a.internal:443 failed: peer certificate expired",
     "TLS handshake with a.internal:443 failed: peer certificate expired"),
    ("WARNING:ledger.supervisor:Back-off restarting failed container restarts=27",
     "Back-off restarting failed container restarts=27"),
    ("ERROR java.net.ConnectException: Connection refused: x/1.2.3.4:90",
     "java.net.ConnectException: Connection refused: x/1.2.3.4:90"),  # the exception's name is kept
])
def test_a_cause_quote_is_the_message_without_level_thread_or_logger(line, quote):
    assert decisive_excerpt(line) == quote


def test_a_series_named_max_is_no_claim_of_a_maximum():
    assert not _MAX_WORDS.search("svc 的 jvm_gc_pause_seconds_max 在 t1 达到 4.8s")
    assert _MAX_WORDS.search("峰值 4.8s") and _MAX_WORDS.search("the max was 4.8s")


def test_a_snapshot_shows_every_series_an_analysis_names():
    # Many points of one series outrank the other series' only ref by shared terms; the other
    # series is still shown, so that a cause naming both is checked against both.
    busy = [EvidenceRef(raw_path=f"series[0].points[{i}]", text=f"svc a_error_ratio=0.{i}5 at 2026-12-07T04:{i:02d}:00Z")
            for i in range(40)]
    other = EvidenceRef(raw_path="series[1].onset", text="svc b_handshake_errors onset: rising from 0 to 3")
    parsed = ParsedProjection(invocation=ToolInvocation(invocation_id=1, run_id="r", tool_name="query_metrics"),
                              scope_refs=[], item_refs=[*busy, other], scope="", source="")
    text = ("svc 的 b_handshake_errors 升高很可能是 a_error_ratio 升高（约自 2026-12-07T04:01:00Z 至 "
            "04:02:00Z、04:03:00Z、04:04:00Z 起）的原因")
    excerpt = SnapshotBuilder().entry(parsed, text).excerpt
    assert "b_handshake_errors" in excerpt and "a_error_ratio" in excerpt


# --- a resource that runs out ----------------------------------------------------------------

_T0 = datetime(2031, 5, 6, 7, 0, tzinfo=UTC)


def _end(kind: str, minutes: float, text: str = "", metric: str = "", subject: str = "ledger-api") -> LinkEnd:
    return LinkEnd(kind, text, _T0 + timedelta(minutes=minutes), subject, metric)


_POOL = _end("onset", 0, metric="ledger_hikari_pending_threads")
_EXHAUSTED = _end("signature", 8, "ERROR HikariPool-1 - Connection is not available, request timed out after 30000ms.")
_SLOW = _end("onset", 2, metric="ledger_http_request_duration_seconds_p99")


def test_a_pool_that_fills_before_requests_slow_down_is_their_cause():
    # The timeout lines come eight minutes after the pool starts filling, six after the latency's
    # onset: no event link (a line never leads from behind), but the resource chain holds.
    link = check_link([_POOL, _EXHAUSTED, _SLOW], Corpus.of([], []))
    assert link.linked and link.kind == "resource"


def test_no_resource_link_without_lines_that_name_its_exhaustion():
    unrelated = _end("signature", 5, "ERROR payment declined code=51")
    assert resource_link([unrelated], [_POOL, _SLOW]) is None


def test_no_resource_link_when_the_resource_rises_after_the_symptom():
    late_pool = _end("onset", 5, metric="ledger_hikari_pending_threads")
    assert resource_link([_EXHAUSTED], [late_pool, _SLOW]) is None


def test_no_resource_link_across_services_or_for_a_series_that_is_no_resource():
    other = _end("onset", 0, metric="ledger_hikari_pending_threads", subject="billing-api")
    assert resource_link([_EXHAUSTED], [other, _SLOW]) is None
    errors = _end("onset", 0, metric="ledger_http_error_ratio")
    assert resource_link([_EXHAUSTED], [errors, _SLOW]) is None


@pytest.mark.parametrize(("metric", "mode"), [
    ("hikaricp_pending_threads", "connection_pool_exhaustion"),  # Micrometer's name for threads waiting on the pool
    ("svc_jvm_heap_used_percent", "memory_oom"),
    ("svc_http_request_duration_seconds_p99", ""),
])
def test_which_series_measure_a_resource_that_can_run_out(metric, mode):
    assert saturable(metric) == mode


def test_errors_alone_never_confirm_a_hypothesis_the_catalogue_names():
    # 「DNS 解析失败」 also says 失败 (errors); a 5xx rise is no sign of the DNS.
    intent = classify_question("krairshon-gw 写入变慢，是不是 DNS 解析失败的问题？")
    errors = make_finding("krairshon-gw 的 tyth_5xx_ratio 在 T1 达到 0.25 ratio，高于窗口前段的 0 ratio。", " [证据: m #1]",
                          ABNORMAL, True, ["query_metrics"])
    line = first_line(intent, "", [errors], "PASS")
    assert line.startswith("无法确认：") and "DNS" in line


@pytest.mark.parametrize(("summary", "kept"), [
    ("plesliam-vroukthe-service 数据库迁移 V45__drop_idx_stock_moves_created_at：删除索引以加快写入速度",
     "V45__drop_idx_stock_moves_created_at"),
    ("shipment 配置调整：shipment.legacy.media.max_retries 3 -> 0，统一重试策略并减少下游压力以及其他很多说明文字",
     "shipment.legacy.media.max_retries"),
])
def test_a_change_summary_cut_for_a_cause_keeps_the_name_the_bound_falls_in(summary, kept):
    assert kept in bounded_summary(summary)


# --- a blip is no step -----------------------------------------------------------------------


def test_one_point_that_the_next_leaves_again_is_a_blip_not_an_anomaly():
    pool = [2.0] * 20 + [4.0] + [2.0, 3.0, 2.0] * 6 + [2.0] * 3
    assert assess_series("svc_hikari_active_connections", "", pool).anomaly is None


def test_a_step_that_holds_or_a_last_point_rise_stays_an_anomaly():
    held = [2.0] * 20 + [9.0] * 6 + [2.0] * 15
    assert assess_series("svc_hikari_active_connections", "", held).anomaly is not None
    just_started = [2.0] * 40 + [9.0]
    assert assess_series("svc_hikari_active_connections", "", just_started).anomaly is not None


def test_a_line_that_reports_the_counted_events_explains_them_within_minutes_either_way():
    failures = _end("onset", 0, metric="ledger_batch_job_failures")
    job_line = _end("signature", 3, "ERROR ledger.batch - job quota-settlement failed target=dres.internal")
    other_line = _end("signature", 3, "ERROR payment declined code=51")
    assert check_link([failures, job_line], Corpus.of([], [])).linked  # 3 min after: it reports those failures
    assert not check_link([failures, other_line], Corpus.of([], [])).linked  # 3 min after and unrelated: no cause


@pytest.mark.parametrize(("query", "blamed"), [
    ("deinpli 一直报错，是不是 bodrour 挂了导致的？", ("bodrour",)),  # one word: a service only evidence can confirm
    ("checkout-api 报错，是不是 redis 挂了？", ("redis",)),
    ("deinpli 一直报错，是不是 deinpli 挂了？", ()),  # the subject itself
    ("cart-api 报错，是不是 timeout 导致的？", ()),  # a failure word, not a name
    ("frontend 的 CPU 高吗？", ()),  # no hypothesis marker: the one word is the question's subject
])
def test_what_a_hypothesis_blames_includes_single_words_that_may_name_a_service(query, blamed):
    assert classify_question(query).blamed == blamed


def test_yes_when_the_evidence_names_a_one_word_service_the_hypothesis_blames():
    intent = classify_question("checkout-api 报错，是不是 redis 挂了？")
    refused = make_finding("checkout-api 在 T1 至 T2 期间多次出现 ERROR 日志：「dial tcp redis:6379: connect: connection refused」。",
                           " [证据: l #2]", ABNORMAL, True, ["query_logs"])
    assert first_line(intent, "", [refused], "PASS").startswith(YES)
    unrelated = make_finding("checkout-api 在 T1 至 T2 期间多次出现 ERROR 日志：「redistribution job failed」。",
                             " [证据: l #2]", ABNORMAL, True, ["query_logs"])
    assert not first_line(intent, "", [unrelated], "PASS").startswith(YES)  # a whole word, not a piece of one

