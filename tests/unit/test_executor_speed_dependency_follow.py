"""Property: naming a dependency with the cheap prechecks gives the names the replaced
code gave. The replaced `named_hosts` is kept below as the oracle (copied, with its patterns): every
shape scanned over every line. Inputs are built from the pieces the shapes look for (keys, URLs,
ports, addresses, `.svc`, call verbs, the Chinese call and failure words, quotes) in any case and
order, with what could trip a precheck: non-ASCII letters that lower-case to ASCII or change
length, full-width and other non-ASCII digits, Unicode whitespace."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from services.executor import dependency_follow
from services.executor.dependency_follow import named_hosts

# --- oracle: the replaced code (over the module's own patterns, which the change kept) -------------

_SHAPES = (dependency_follow._KEYED, dependency_follow._URL, dependency_follow._HOST_PORT,
           dependency_follow._JAVA_ADDRESS, dependency_follow._KUBERNETES, dependency_follow._CALL_VERB,
           dependency_follow._CJK_CALL_BEFORE, dependency_follow._CJK_FAILURE_AFTER)
_DEPENDENCY_KEY = dependency_follow._DEPENDENCY_KEY


def oracle_named_hosts(message: str) -> list[str]:
    """Every shape scanned over the whole line, no precheck."""
    found: list[tuple[int, str]] = []
    for shape in _SHAPES:
        for match in shape.finditer(message):
            if shape is dependency_follow._KEYED and not _DEPENDENCY_KEY.search(match["key"]):
                continue
            name = match["name"].strip(".-_").lower()
            if name and not dependency_follow._is_address(name):
                found.append((match.start("name"), name))
    return list(dict.fromkeys(name for _, name in sorted(found)))


def test_the_key_words_are_the_replaced_pattern() -> None:
    assert _DEPENDENCY_KEY.pattern == (
        "upstream|downstream|host|peer|target|backend|remote|server|service|svc|dependency|endpoint|addr|url|uri|dest|dial"
    )
    assert _DEPENDENCY_KEY.flags & re.ASCII and _DEPENDENCY_KEY.flags & re.IGNORECASE


# --- inputs --------------------------------------------------------------------------------------

PIECES = [
    "upstream", "Downstream_addr", "HOST", "host", "peer.service", "db.Host", "backendHost", "target", "remote",
    "server", "svc", "dependency", "endpoint", "url", "URI", "dest", "dial", "pool", "err", "msg", "level",
    "=", ":", ": ", " = ", '"', "'", "`", "「", "」", "『", "』", "“", "”", "(", ")", "[", "]", "<", ">",
    "http://", "HTTPS://user:pw@", "grpc+tls://", "://", "@", "/", "/v1/quota", ".", "-", "_",
    "quota-keeper", "Seat-Ledger", "seat-ledger.fares.svc.cluster.local", ".svc", ".SVC", "promo-engine", "x", "a1",
    "10.0.0.1", "/10.0.0.1", "/10.0.0", ":8080", ":5432", ":53", ":123456", "12:30", "v1.2.3", "::1",
    "calling ", "CALLED TO ", "calls to ", "connect to ", "Connecting to ", "connection to ", "request to ",
    "requesting ", "dial tcp ", "dialing udp ", "Reach ", "reaching ", "contacting ", "timed out calling ",
    "timed out connecting to ", "refused:", "Connection refused: ", "reset :", "unreachable:", "unavailable:",
    "failed:", "timed out:", "TIMEOUT:", "timeout", "failed after 3 attempts",
    "调用", "请求", "连接", "访问", "依赖", "上游", "下游", "服务", "的", "接口", "响应",
    "超时", "失败", "异常", "不可用", "拒绝", "报错", "出错", "（3000ms）",
    " ", "  ", "\t", "\n", "\u3000", "\xa0", "\x1c", "İ", "K", "ſ", "Σ", "٣", "１２", "中文",
]
messages = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=24).map("".join),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), max_size=16).map("".join),
    st.text(max_size=80),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages)
@example('[error] upstream timed out, upstream: "http://quota-keeper.fares.svc.cluster.local:8080/v1/quota"')
@example("Caused by: java.net.ConnectException: Connection refused: seat-ledger/10.0.0.1:5432")
@example("调用quota-keeper失败 traceId=ab12")
@example("下游「seat-ledger」响应超时")
@example("SEAT-LEDGER 服务不可用 and UPSTREAM=Quota-Keeper")
@example("lookup promo-engine.default.SVC on 10.96.0.10:53: no such host")
@example("x " * 1100 + "upstream=quota-keeper")  # past the cached length
def test_the_names_a_line_points_at_are_the_replaced_codes(message: str) -> None:
    expected = oracle_named_hosts(message)
    assert named_hosts(message) == expected
    names = named_hosts(message)  # from the cache: the caller's own list
    assert names == expected
    names.append("mine")
    assert named_hosts(message) == expected


KEY_WORDS = _DEPENDENCY_KEY.pattern.split("|")
VERBS = ["calling", "call to", "calls to", "called to", "connect to", "connects to", "connected to", "connecting to",
         "connection to", "request to", "requests to", "requesting", "dial", "dialing", "dial tcp", "dialing udp",
         "reach", "reaching", "contact", "contacting", "timed out calling", "timed out connecting to", "refused:",
         "reset:", "unreachable:", "unavailable:", "failed:", "timed out:", "timeout:"]


def test_each_key_word_and_call_verb_alone_still_names_the_service() -> None:
    """Every word a precheck looks for, as the only one in the line (a precheck missing a word
    would drop exactly these lines)."""
    lines = [f"{word}=quota-keeper" for word in KEY_WORDS] + [f"x_{word.upper()}: 'quota-keeper'" for word in KEY_WORDS]
    lines += [f"{verb} quota-keeper" for verb in VERBS] + [f"{verb.upper()} http://quota-keeper/" for verb in VERBS]
    lines += [f"{word}quota-keeper" for word in ("调用", "请求", "连接", "访问", "依赖", "上游", "下游")]
    lines += [f"quota-keeper {gap}{failure}" for gap in ("", "服务", "的", "调用", "」 服务的接口", "'") for failure in
              ("超时", "失败", "异常", "不可用", "拒绝", "报错", "出错")]
    lines += ["quota-keeper:8080", "quota-keeper/10.0.0.1", "quota-keeper.fares.svc", "https://quota-keeper"]
    for line in lines:
        assert named_hosts(line) == oracle_named_hosts(line) != [], line
