"""The failure-mode catalogue (shared/core/failure_modes.json + failure_modes.py): what a question,
a log line, a metric name and a change are read as, and how an operator's file extends it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.config import CommonSettings, configured_failure_modes
from shared.core.failure_modes import FailureModes, FailureModesError, load_failure_modes
from shared.core.grounding.claim_features import extract

REQUIRED_IDS = (
    "memory_oom", "disk_full", "cpu_saturation", "connection_pool_exhaustion", "thread_pool_exhaustion",
    "slow_query", "lock_contention", "certificate_expiry", "dns_failure", "upstream_down", "dependency_slow",
    "rate_limited", "config_change", "bad_release", "cache_hit_collapse", "consumer_lag", "gc_pause",
    "network_flapping", "crash_loop", "batch_external_failure",
)
SYSTEM_CHANGES = ("重启", "回滚", "扩容", "删除", "restart", "rollback")


@pytest.fixture(scope="module")
def modes() -> FailureModes:
    return load_failure_modes(None)


# --- the shipped catalogue ------------------------------------------------------------------------


def test_every_required_mechanism_is_shipped_with_a_name_and_read_only_next_steps(modes: FailureModes) -> None:
    assert set(REQUIRED_IDS) <= set(modes.ids)
    for mechanism_id in REQUIRED_IDS:
        mechanism = modes.by_id(mechanism_id)
        assert mechanism.name_zh and re.search(r"[\u4e00-\u9fff]", mechanism.name_zh), mechanism_id
        assert 2 <= len(mechanism.next_steps_zh) <= 4, mechanism_id
        for step in mechanism.next_steps_zh:
            assert not any(word in step.lower() for word in SYSTEM_CHANGES), (mechanism_id, step)
        assert mechanism.signals.metric or mechanism.signals.log, mechanism_id


def test_exhaustible_resources_are_marked(modes: FailureModes) -> None:
    exhaustible = {m.id for m in modes.mechanisms if m.at_limit_resource}
    assert {"memory_oom", "disk_full", "cpu_saturation", "connection_pool_exhaustion",
            "thread_pool_exhaustion"} <= exhaustible
    assert not {"dns_failure", "bad_release", "config_change", "certificate_expiry"} & exhaustible


def test_the_three_pools_are_different_entities(modes: FailureModes) -> None:
    pool = modes.by_id("connection_pool_exhaustion")
    assert pool.entity == "db_connection_pool"
    assert {"redis_pool", "http_client_pool"} <= set(pool.entities)
    assert modes.by_id("thread_pool_exhaustion").entity == "thread_pool"


def test_an_unknown_id_is_a_key_error(modes: FailureModes) -> None:
    with pytest.raises(KeyError):
        modes.by_id("no_such_mechanism")


# --- log lines ------------------------------------------------------------------------------------

LINES = [
    # Java / JVM
    ("java.lang.OutOfMemoryError: Java heap space", "memory_oom"),
    ("HikariPool-1 - Connection is not available, request timed out after 30000ms.", "connection_pool_exhaustion"),
    ("org.apache.commons.dbcp.SQLNestedException: Cannot get a connection, pool error Timeout waiting for idle object",
     "connection_pool_exhaustion"),
    ("java.util.concurrent.RejectedExecutionException: Task java.util.concurrent.FutureTask@5e9f23b4 rejected from "
     "java.util.concurrent.ThreadPoolExecutor@1b6d3586[Running, pool size = 200, active threads = 200]",
     "thread_pool_exhaustion"),
    ("[DUBBO] Thread pool is EXHAUSTED! Thread Name: DubboServerHandler-10.0.0.1:20880", "thread_pool_exhaustion"),
    ("java.net.SocketTimeoutException: Read timed out", "dependency_slow"),
    ("javax.net.ssl.SSLHandshakeException: PKIX path validation failed: "
     "java.security.cert.CertificateExpiredException: NotAfter: Mon Dec 01 00:00:00 UTC 2026", "certificate_expiry"),
    ("java.net.UnknownHostException: db.internal.example: Name or service not known", "dns_failure"),
    ("[Full GC (Ergonomics) [PSYoungGen: 1024K->0K(2048K)] 7.1G->7.0G(8G), 4.2 secs] Pause Full", "gc_pause"),
    # Go
    ("fatal error: runtime: out of memory", "memory_oom"),
    ('Get "https://api.partner.example/v1": x509: certificate has expired or is not yet valid', "certificate_expiry"),
    ("dial tcp: lookup db.internal on 10.96.0.10:53: no such host", "dns_failure"),
    ("rpc error: code = DeadlineExceeded desc = context deadline exceeded", "dependency_slow"),
    ("read tcp 10.0.0.5:41234->10.0.0.9:6379: read: connection reset by peer", "network_flapping"),
    ("dial tcp 10.0.0.9:443: connect: no route to host", "network_flapping"),
    # Python
    ("OSError: [Errno 28] No space left on device", "disk_full"),
    ("sqlalchemy.exc.TimeoutError: QueuePool limit of size 5 overflow 10 reached, connection timed out, timeout 30.00",
     "connection_pool_exhaustion"),
    ("ssl.SSLCertVerificationError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
     "certificate has expired (_ssl.c:1006)", "certificate_expiry"),
    ("socket.gaierror: [Errno -3] Temporary failure in name resolution", "dns_failure"),
    # Node
    ("FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory", "memory_oom"),
    ("Error: connect ECONNREFUSED 127.0.0.1:5432", "upstream_down"),
    ("Error: getaddrinfo ENOTFOUND api.partner.example", "dns_failure"),
    ("KnexTimeoutError: Knex: Timeout acquiring a connection. The pool is probably full.", "connection_pool_exhaustion"),
    # nginx / envoy
    ("connect() failed (111: Connection refused) while connecting to upstream, client: 10.0.0.1", "upstream_down"),
    ("upstream timed out (110: Connection timed out) while reading response header from upstream", "dependency_slow"),
    ("upstream connect error or disconnect/reset before headers. reset reason: connection failure", "upstream_down"),
    ('10.0.0.1 - - [07/Dec/2026:01:00:00 +0000] "GET /v1/items HTTP/1.1" 429 162 "-" "curl/8.5.0"', "rate_limited"),
    # PostgreSQL / MySQL
    ("FATAL:  sorry, too many clients already", "connection_pool_exhaustion"),
    ("FATAL:  remaining connection slots are reserved for non-replication superuser connections",
     "connection_pool_exhaustion"),
    ("ERROR:  could not extend file \"base/16384/24576\": No space left on device", "disk_full"),
    ("ERROR:  deadlock detected", "lock_contention"),
    ("LOG:  process 4242 still waiting for ShareLock on transaction 9001 after 1000.052 ms", "lock_contention"),
    ("LOG:  duration: 5012.331 ms  statement: SELECT * FROM orders WHERE note LIKE '%x%'", "slow_query"),
    ("ERROR 1205 (HY000): Lock wait timeout exceeded; try restarting transaction", "lock_contention"),
    ("# Query_time: 12.503  Lock_time: 0.000 Rows_sent: 1  Rows_examined: 8123456", "slow_query"),
    # Redis
    ("redis.clients.jedis.exceptions.JedisConnectionException: Could not get a resource from the pool",
     "connection_pool_exhaustion"),
    ("OOM command not allowed when used memory > 'maxmemory'.", "memory_oom"),
    # Kafka
    ("[Consumer clientId=c-1, groupId=billing] Attempt to heartbeat failed since group is rebalancing", "consumer_lag"),
    # Kubernetes kubelet
    ("Back-off restarting failed container app in pod web-0_default", "crash_loop"),
    ("Last State: Terminated  Reason: OOMKilled  Exit Code: 137", "memory_oom"),
    ("Warning  BackoffLimitExceeded  Job has reached the specified backoff limit", "batch_external_failure"),
    ("The node was low on resource: ephemeral-storage.", "disk_full"),
]


@pytest.mark.parametrize(("line", "expected"), LINES)
def test_a_log_line_names_its_mechanism(modes: FailureModes, line: str, expected: str) -> None:
    assert [m.id for m in modes.for_line(line)] == [expected]


def test_the_most_specific_reading_of_a_line_wins(modes: FailureModes) -> None:
    # The pool's own message holds "request timed out": it is pool exhaustion, not a slow dependency.
    line = "HikariPool-1 - Connection is not available, request timed out after 30000ms."
    assert [m.id for m in modes.for_line(line)] == ["connection_pool_exhaustion"]
    # "disk quota exceeded" is a full disk, not a rate quota.
    assert [m.id for m in modes.for_line("write /data/out.bin: disk quota exceeded")] == ["disk_full"]
    # A Redis client's pool message names the Redis pool.
    mentions = modes.line_mentions("JedisConnectionException: Could not get a resource from the pool")
    assert [(m.mechanism.id, m.entity) for m in mentions] == [("connection_pool_exhaustion", "redis_pool")]


@pytest.mark.parametrize("line", [
    "request failed",
    "error processing request",
    "failed to handle request: internal error",
    "ERROR something went wrong",
    "Exception in thread \"main\" java.lang.NullPointerException",
    "GET /health 200 3ms",
    "user alice left the group chat",
    "cache miss for key session:42",
    "retrying in 5s",
])
def test_a_generic_line_names_nothing(modes: FailureModes, line: str) -> None:
    assert modes.for_line(line) == ()


def test_the_substring_prefilter_never_hides_a_match(modes: FailureModes) -> None:
    """Each pattern runs only on lines holding one of its needed substrings: on every line here the
    prefiltered reading equals running every pattern."""
    rules = modes._log_rules.rules
    for line, _ in LINES:
        lowered = line.lower()
        for rule in rules:
            if rule.pattern.search(lowered):
                assert any(need in lowered for need in rule.needs), (rule.pattern.pattern, rule.needs, line)


# --- questions ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("question", "expected"), [
    ("数据库连接池是不是满了？", [("connection_pool_exhaustion", "db_connection_pool")]),
    ("连接池被打满了吗", [("connection_pool_exhaustion", "db_connection_pool")]),
    ("hikari 连接池是否耗尽", [("connection_pool_exhaustion", "db_connection_pool")]),
    ("线程池是不是打满了", [("thread_pool_exhaustion", "thread_pool")]),
    ("Redis 连接池耗尽了吗？", [("connection_pool_exhaustion", "redis_pool")]),
    ("redis连接数是不是不够", [("connection_pool_exhaustion", "redis_pool")]),
    ("是不是 HTTP 连接池的问题", [("connection_pool_exhaustion", "http_client_pool")]),
    ("是不是 OOM 了", [("memory_oom", "memory")]),
    ("磁盘写满了吗", [("disk_full", "disk")]),
    ("证书过期了吗", [("certificate_expiry", "certificate")]),
    ("是不是 DNS 解析失败", [("dns_failure", "dns")]),
    ("为什么命中率降了", [("cache_hit_collapse", "cache")]),
    ("kafka 消费积压是怎么回事", [("consumer_lag", "queue_consumer")]),
    ("是不是被限流了（429）", [("rate_limited", "rate_limit")]),
    ("是不是 Full GC 导致的停顿", [("gc_pause", "gc")]),
])
def test_the_question_names_a_hypothesis(modes: FailureModes, question: str, expected: list[tuple[str, str]]) -> None:
    assert [(m.mechanism.id, m.entity) for m in modes.hypothesis_in(question)] == expected


def test_pools_named_together_stay_apart(modes: FailureModes) -> None:
    found = modes.hypothesis_in("线程池和数据库连接池哪个先满的？Redis 连接池呢？")
    assert [(m.mechanism.id, m.entity) for m in found] == [
        ("thread_pool_exhaustion", "thread_pool"),
        ("connection_pool_exhaustion", "db_connection_pool"),
        ("connection_pool_exhaustion", "redis_pool"),
    ]
    assert [m.text for m in found] == ["线程池", "数据库连接池", "redis 连接池"]


def test_a_cause_and_a_symptom_are_both_read(modes: FailureModes) -> None:
    found = modes.hypothesis_in("是慢查询导致连接池耗尽吗")
    assert [m.mechanism.id for m in found] == ["slow_query", "connection_pool_exhaustion"]


def test_a_dependency_that_is_down_is_not_a_crash_here(modes: FailureModes) -> None:
    assert [m.mechanism.id for m in modes.hypothesis_in("是不是下游挂了")] == ["upstream_down"]
    assert [m.mechanism.id for m in modes.hypothesis_in("服务是不是挂了")] == ["crash_loop"]


def test_a_question_about_nothing_in_particular_names_nothing(modes: FailureModes) -> None:
    assert modes.hypothesis_in("服务整体情况怎么样") == ()


# --- metric names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("metric", "mechanism", "entity", "bad"), [
    ("container_memory_working_set_bytes", "memory_oom", "memory", "up"),
    ("jvm_memory_used_ratio", "memory_oom", "memory", "up"),
    ("processResidentMemoryBytes", "memory_oom", "memory", "up"),
    ("node_filesystem_avail_bytes", "disk_full", "disk", "down"),
    ("kubelet_volume_stats_used_percent", "disk_full", "disk", "up"),
    ("hikaricp_connections_pending", "connection_pool_exhaustion", "db_connection_pool", "up"),
    ("db.pool.connections.active", "connection_pool_exhaustion", "db_connection_pool", "up"),
    ("redis_pool_active_connections", "connection_pool_exhaustion", "redis_pool", "up"),
    ("executor_pool_active_threads", "thread_pool_exhaustion", "thread_pool", "up"),
    ("tomcat_threads_busy_threads", "thread_pool_exhaustion", "thread_pool", "up"),
    ("cache_hit_ratio", "cache_hit_collapse", "cache", "down"),
    ("kafka_consumergroup_lag", "consumer_lag", "queue_consumer", "up"),
    ("jvm_gc_pause_seconds", "gc_pause", "gc", "up"),
    ("container_cpu_cfs_throttled_periods_total", "cpu_saturation", "cpu", "up"),
    ("kube_pod_container_status_restarts_total", "crash_loop", "process", "up"),
    ("probe_ssl_earliest_cert_expiry", "certificate_expiry", "certificate", "down"),
    ("node_netstat_Tcp_RetransSegs", "network_flapping", "network", "up"),
    ("coredns_dns_responses_servfail_total", "dns_failure", "dns", "up"),
    ("http_client_requests_429_total", "rate_limited", "rate_limit", "up"),
    ("up", "upstream_down", "dependency", "down"),
])
def test_a_metric_name_maps_to_its_mechanism(modes: FailureModes, metric: str, mechanism: str, entity: str,
                                             bad: str) -> None:
    found = modes.for_metric(metric)
    assert found, metric
    assert (found[0].mechanism.id, found[0].entity, found[0].signal.bad) == (mechanism, entity, bad)


@pytest.mark.parametrize(("metric", "not_expected"), [
    ("redis_pool_active_connections", "db_connection_pool"),
    ("executor_pool_active_threads", "db_connection_pool"),
    ("hikaricp_connections_pending", "thread_pool"),
    ("container_cpu_cfs_throttled_periods_total", "rate_limit"),
])
def test_a_metric_of_one_pool_is_not_another(modes: FailureModes, metric: str, not_expected: str) -> None:
    assert not_expected not in {match.entity for match in modes.for_metric(metric)}


@pytest.mark.parametrize("metric", ["http_requests_total", "scale_up_events_total", "build_info", "orders_created"])
def test_a_metric_of_no_failure_maps_to_nothing(modes: FailureModes, metric: str) -> None:
    assert modes.for_metric(metric) == ()


def test_the_limit_of_a_resource(modes: FailureModes) -> None:
    memory = modes.for_metric("jvm_memory_used_ratio")[0]
    assert memory.at_limit(0.97) is True  # a ratio, read against the 95 % limit
    assert memory.at_limit(0.60) is False
    assert modes.for_metric("container_memory_used_percent")[0].at_limit(96.0) is True
    # Bytes have no percentage limit: it cannot be told.
    assert modes.for_metric("container_memory_working_set_bytes")[0].at_limit(8e9) is None
    # Free space falling is bad: at the limit at or below 5 % free.
    avail = modes.for_metric("node_filesystem_avail_percent")[0]
    assert (avail.mechanism.id, avail.at_limit(3.0), avail.at_limit(40.0)) == ("disk_full", True, False)
    # A pool is at its limit when its active connections reach its maximum, given by the caller.
    active = modes.for_metric("hikaricp_connections_active")[0]
    assert (active.at_limit(20, limit=20), active.at_limit(12, limit=20), active.at_limit(20)) == (True, False, None)
    # Anyone waiting for a connection means the pool is used up.
    assert modes.for_metric("hikaricp_connections_pending")[0].at_limit(3) is True


# --- changes --------------------------------------------------------------------------------------


def test_changes_map_to_what_they_can_set_off(modes: FailureModes) -> None:
    assert "bad_release" in [m.id for m in modes.for_change("deploy", "发布 v2.3.1：新增导出接口")]
    config = [m.id for m in modes.for_change("config", "下游调用 timeout 3000ms -> 800ms")]
    assert "config_change" in config and "dependency_slow" in config
    pool = [m.id for m in modes.for_change("config", "maximumPoolSize 20 -> 5")]
    assert "connection_pool_exhaustion" in pool and "config_change" in pool
    assert "cache_hit_collapse" in [m.id for m in modes.for_change("config", "本地缓存 TTL 300s -> 30s")]
    assert "bad_release" not in [m.id for m in modes.for_change("config", "日志格式改为 JSON")]


# --- an operator's file ---------------------------------------------------------------------------


def _mechanism(mechanism_id: str, **extra: object) -> dict[str, object]:
    body: dict[str, object] = {
        "id": mechanism_id,
        "name_zh": "许可证配额耗尽",
        "aliases_zh": ["许可证耗尽"],
        "entity": "license",
        "signals": {"log": [r"license (?:seats|quota) exhausted"], "metric": [{"tokens": ["license", "free"], "bad": "down"}]},
        "next_steps_zh": ["查看许可证用量与到期时间", "确认占用许可证最多的客户端"],
    }
    body.update(extra)
    return body


def _write(tmp_path: Path, body: object) -> str:
    path = tmp_path / "failure_modes.json"
    path.write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")
    return str(path)


def test_an_operator_file_adds_a_mechanism_and_replaces_one(tmp_path: Path) -> None:
    replaced_dns = _mechanism("dns_failure", name_zh="内部解析故障", aliases_zh=["解析故障"], entity="dns",
                              signals={"log": [r"resolver-x gave up"]})
    path = _write(tmp_path, {"version": 1, "mechanisms": [_mechanism("license_exhaustion"), replaced_dns]})
    modes = load_failure_modes(path)
    shipped = load_failure_modes(None)
    assert modes.ids[-1] == "license_exhaustion" and set(shipped.ids) <= set(modes.ids)
    assert [m.id for m in modes.for_line("ERROR license seats exhausted for team a")] == ["license_exhaustion"]
    assert modes.for_metric("license_free_count")[0].mechanism.id == "license_exhaustion"
    assert [m.mechanism.id for m in modes.hypothesis_in("是不是许可证耗尽了")] == ["license_exhaustion"]
    # Replaced whole: the shipped dns patterns are gone, the operator's are in.
    assert modes.by_id("dns_failure").name_zh == "内部解析故障"
    assert modes.for_line("dial tcp: lookup x on 10.0.0.10:53: no such host") == ()
    assert [m.id for m in modes.for_line("resolver-x gave up after 3 tries")] == ["dns_failure"]
    # The shipped catalogue is untouched.
    assert [m.id for m in shipped.for_line("dial tcp: lookup x on 10.0.0.10:53: no such host")] == ["dns_failure"]


def test_the_settings_read_the_operator_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, {"mechanisms": [_mechanism("license_exhaustion")]})
    monkeypatch.setenv("ATTEST_FAILURE_MODES_FILE", path)
    assert CommonSettings().failure_modes_file == path
    configured_failure_modes.cache_clear()
    try:
        assert "license_exhaustion" in configured_failure_modes().ids
    finally:
        configured_failure_modes.cache_clear()


@pytest.mark.parametrize(("content", "says"), [
    (None, "cannot be read"),
    ("{not json", "is not JSON"),
    (json.dumps({"mechanisms": [_mechanism("x", colour="red")]}), r"mechanisms\[x\]\.colour"),
    (json.dumps({"mechanisms": [_mechanism("x", signals={"log": ["(unclosed"]})]}),
     r"mechanisms\[x\]\.signals\.log\.0.*not a valid regular expression"),
    (json.dumps({"mechanisms": [_mechanism("x", question_patterns=["[z-a]"])]}),
     r"mechanisms\[x\]\.question_patterns.*not a valid regular expression"),
    (json.dumps({"mechanisms": [_mechanism("x", signals={"metric": [{"tokens": ["Not A Token"], "bad": "up"}]})]}),
     r"mechanisms\[x\]\.signals\.metric\.0\.tokens"),
    (json.dumps({"mechanisms": [_mechanism("x", signals={"metric": [{"tokens": ["a"], "bad": "sideways"}]})]}),
     r"mechanisms\[x\]\.signals\.metric\.0\.bad"),
    (json.dumps({"mechanisms": [_mechanism("x", next_steps_zh=["看日志", "重启实例"])]}),
     r"mechanisms\[x\]\.next_steps_zh.*remedies_zh"),
    (json.dumps({"mechanisms": [_mechanism("x", next_steps_zh=["看日志"])]}), r"mechanisms\[x\]\.next_steps_zh"),
    (json.dumps({"mechanisms": [{"id": "x"}]}), r"mechanisms\[x\]\.name_zh"),
    (json.dumps({"mechanisms": [_mechanism("x", signals={"log": [{"pattern": "a b c", "entity": "other"}]})]}),
     r"mechanisms\[x\].*'other' is neither"),
    (json.dumps({"mechanisms": [_mechanism("x"), _mechanism("x")]}), "listed twice"),
    (json.dumps({"version": 2, "mechanisms": []}), "version"),
])
def test_a_bad_operator_file_is_a_clear_start_up_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       content: str | None, says: str) -> None:
    path = tmp_path / "failure_modes.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(FailureModesError, match=says) as raised:
        load_failure_modes(str(path))
    assert str(path) in str(raised.value)
    monkeypatch.setenv("ATTEST_FAILURE_MODES_FILE", str(path))
    with pytest.raises(ValidationError, match="failure-mode file"):
        CommonSettings()


def test_next_steps_name_no_identifier_an_answer_could_not_ground():
    """A next step is advice in our words: it names no command, table or event (`extract` finds
    no entity or code in it), so no answer's guard refuses it for naming what its evidence lacks."""
    for mechanism in load_failure_modes().mechanisms:
        for step in mechanism.next_steps_zh:
            features = extract(step)
            assert not features.entities and not features.codes, (mechanism.id, step)
