"""Follow a dependency: when an error signature of a checked service names
another service of the catalogue, the executor checks that service too.

The signatures are the WARN-or-worse lines of the run's READY `query_logs` invocations. A line
names a dependency by one of a few generic shapes — never by a list of names:

- a keyed value whose key says where a call went: `upstream=X`, `"upstream":"X"`,
  `upstream: "http://X:8080/…"`, `host=X`, `peer.service=X`, `backend_addr=X:9000` …;
- an address: `http://X/…`, `X:8080`, `X.<namespace>.svc…`, Java's `X/10.0.0.1:5432`;
- a verb of calling: `calling X`, `connect to X`, `dial tcp X`, `Connection refused: X`,
  「调用 X 超时」, 「连接 X 失败」, 「X 响应超时」.

A shape only proposes a name; the run's service resolution (`service_catalogue.Resolution`)
decides. A name the catalogue does not know (a host, a database, a third party), a name the
question named and left unchecked, the service itself and its own instances (the hosts its lines
come from) are never followed, and nothing is said about them. When the catalogue could not be
read, nothing is followed: no name could be told from a host name.

At most MAX_FOLLOWED services are followed per run, and the checked services plus the followed
ones stay within the per-question limit. Each followed service gets the caller's `query_metrics`
and `query_logs` calls over the caller's window; services are taken by how strongly the lines
name them (error lines outweigh warnings), then by where they are first named, so the order is
deterministic. A dependency left out by these bounds is named as not checked.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.executor.log_clusters import LEVEL_WEIGHT, MIN_COUNT
from services.executor.service_catalogue import Resolution
from shared.core.contracts import MissingInfo, ToolInvocation
from shared.core.tool_catalogue import QUERY_LOGS, QUERY_METRICS
from shared.core.tool_results import LogHit, LogsResult, read_result
from shared.text_scan import per_text_cache

MAX_FOLLOWED = 2
# The calls a plan made, in order: (tool name, arguments).
Calls = Sequence[tuple[str, Mapping[str, Any]]]
FOLLOWED_TOOLS = (QUERY_METRICS, QUERY_LOGS)
# Arguments of the caller's calls that do not carry over to the dependency's: a substring filter
# written for the caller's messages would hide the dependency's own lines.
_CALLER_ONLY_ARGUMENTS = ("contains",)

# ASCII word rules throughout (re.ASCII): a Chinese character next to a name is a boundary.
_FLAGS = re.ASCII | re.IGNORECASE
# A host-like name: DNS labels (letters, digits, '-', '_'), dot-separated.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?"
_NAME = rf"{_LABEL}(?:\.{_LABEL})*"
_NOT_AFTER_NAME = r"(?<![A-Za-z0-9_.-])"
_SCHEME = r"(?:[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/\s\"']*@)?)?"
_OPEN_QUOTE = r"[\"'`「『“(\[<]?"
# Keys that say where a call went; any key containing one of these words (`upstream_addr`,
# `peer.service`, `db.host`, `backendHost` …).
_DEPENDENCY_WORDS = (
    "upstream", "downstream", "host", "peer", "target", "backend", "remote", "server", "service", "svc",
    "dependency", "endpoint", "addr", "url", "uri", "dest", "dial",
)
_DEPENDENCY_KEY = re.compile("|".join(_DEPENDENCY_WORDS), _FLAGS)
_KEYED = re.compile(rf"(?P<key>[A-Za-z_][\w.-]*)[\"']?\s*[=:]\s*{_OPEN_QUOTE}\s*{_SCHEME}(?P<name>{_NAME})", _FLAGS)
_URL = re.compile(rf"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/\s\"']*@)?(?P<name>{_NAME})", _FLAGS)
_HOST_PORT = re.compile(rf"(?<![A-Za-z0-9_.:/-])(?P<name>{_NAME}):\d{{1,5}}(?![\d:])", _FLAGS)
_JAVA_ADDRESS = re.compile(rf"{_NOT_AFTER_NAME}(?P<name>{_NAME})/\d{{1,3}}(?:\.\d{{1,3}}){{3}}\b", _FLAGS)
_KUBERNETES = re.compile(rf"{_NOT_AFTER_NAME}(?P<name>{_LABEL})(?:\.{_LABEL})?\.svc\b", _FLAGS)
_CALL_VERB = re.compile(
    r"\b(?:calling|call(?:s|ed)?\s+to|connect(?:s|ed|ing)?\s+to|connection\s+to|requests?\s+to|requesting|"
    r"dial(?:ing)?(?:\s+(?:tcp|udp))?|reach(?:ing)?|contact(?:ing)?|timed\s+out\s+(?:calling|connecting\s+to)|"
    r"(?:refused|reset|unreachable|unavailable|failed|timed\s+out|timeout)\s*:)(?![A-Za-z0-9_])"
    rf"\s*{_OPEN_QUOTE}\s*{_SCHEME}(?P<name>{_NAME})",
    _FLAGS,
)
_CJK_CALL_BEFORE = re.compile(
    rf"(?:调用|请求|连接|访问|依赖|上游|下游)\s*(?:服务)?\s*{_OPEN_QUOTE}\s*{_SCHEME}(?P<name>{_NAME})", _FLAGS
)
_CJK_FAILURE_AFTER = re.compile(
    rf"{_NOT_AFTER_NAME}(?P<name>{_NAME})\s*[\"'`」』”)\]>]?\s*(?:服务)?\s*(?:的)?\s*(?:调用|请求|连接|接口|响应)?\s*"
    r"(?:超时|失败|异常|不可用|拒绝|报错|出错)",
    _FLAGS,
)
_LETTER = re.compile(r"[A-Za-z]")
_CACHED_LINES = 8192
_MAX_CACHED_CHARS = 2000

# Cheap necessary conditions, read on the lower-cased message (an ASCII match of a shape is there,
# lower-cased), so that a shape scans a line only when the line may hold it: trying a name at
# every word of a long line is what costs, and most error lines hold no shape at all.
_CALL_VERB_WORDS = ("call", "connect", "request", "dial", "reach", "contact", "timed", "refused", "reset",
                    "unavailable", "failed", "timeout")  # every alternative of _CALL_VERB holds one
_CJK_CALL_WORDS = ("调用", "请求", "连接", "访问", "依赖", "上游", "下游")
_NAME_END_PORT = re.compile(r"[a-z0-9]:\d", _FLAGS)
_NAME_END_ADDRESS = re.compile(r"[a-z0-9]/\d", _FLAGS)
# The end of a _CJK_FAILURE_AFTER match (the name's last character, then the failure words) read
# on the reversed line: the search then starts at the rare failure words, not at every name.
_FAILURE_AFTER_NAME_END_REVERSED = re.compile(
    r"(?:时超|败失|常异|用可不|绝拒|错报|错出)\s*(?:用调|求请|接连|口接|应响)?\s*(?:的)?\s*(?:务服)?\s*[\"'`」』”)\]>]?\s*[a-z0-9]",
    _FLAGS,
)


def _may_be_keyed(lowered: str) -> bool:
    return any(word in lowered for word in _DEPENDENCY_WORDS)  # a kept match's key holds one


def _may_be_url(lowered: str) -> bool:
    return "://" in lowered


def _may_be_host_port(lowered: str) -> bool:
    return ":" in lowered and _NAME_END_PORT.search(lowered) is not None


def _may_be_java_address(lowered: str) -> bool:
    return "/" in lowered and _NAME_END_ADDRESS.search(lowered) is not None


def _may_be_kubernetes(lowered: str) -> bool:
    return ".svc" in lowered


def _may_be_call_verb(lowered: str) -> bool:
    return any(word in lowered for word in _CALL_VERB_WORDS)


def _may_be_cjk_call(lowered: str) -> bool:
    return any(word in lowered for word in _CJK_CALL_WORDS)


def _may_be_cjk_failure(lowered: str) -> bool:
    return _FAILURE_AFTER_NAME_END_REVERSED.search(lowered[::-1]) is not None


_SHAPES: tuple[tuple[re.Pattern[str], Callable[[str], bool]], ...] = (
    (_KEYED, _may_be_keyed),
    (_URL, _may_be_url),
    (_HOST_PORT, _may_be_host_port),
    (_JAVA_ADDRESS, _may_be_java_address),
    (_KUBERNETES, _may_be_kubernetes),
    (_CALL_VERB, _may_be_call_verb),
    (_CJK_CALL_BEFORE, _may_be_cjk_call),
    (_CJK_FAILURE_AFTER, _may_be_cjk_failure),
)


def _is_address(name: str) -> bool:
    """An IP address, or digits and dots alone (a version, a time): names no service."""
    if not _LETTER.search(name):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def named_hosts(message: str) -> list[str]:
    """The host-like names a log message points at by one of the shapes above, lower-cased, in
    order of appearance, each once. Only proposals: the catalogue decides which are services."""
    return list(_names(message))


# Runs over one window read the same error lines: each line's names are found once.
@per_text_cache(_CACHED_LINES, _MAX_CACHED_CHARS)
def _names(message: str) -> tuple[str, ...]:
    found: list[tuple[int, str]] = []
    lowered = message.lower()
    for shape, may_hold in _SHAPES:
        if not may_hold(lowered):
            continue
        for match in shape.finditer(message):
            if shape is _KEYED and not _DEPENDENCY_KEY.search(match["key"]):
                continue
            name = match["name"].strip(".-_").lower()
            if name and not _is_address(name):
                found.append((match.start("name"), name))
    return tuple(dict.fromkeys(name for _, name in sorted(found)))


def _candidates(host: str) -> list[str]:
    """The names a host may be known by: itself, then its first DNS label
    (`quota-keeper.fares.svc.cluster.local` is `quota-keeper`)."""
    first = host.split(".", 1)[0]
    return [host] if first == host else [host, first]


def _catalogued(host: str, resolution: Resolution) -> str | None:
    """The catalogue's spelling of the service `host` names, if a tool may be called for it."""
    return next((name for name in map(resolution.callable_name, _candidates(host)) if name), None)


@dataclass(frozen=True)
class Dependency:
    """A catalogued service that a checked service's error lines name."""

    service: str  # the catalogue's spelling
    caller: str
    invocation_id: int  # the caller's query_logs invocation whose line first names it
    raw_path: str  # that line
    weight: float  # how strongly the lines name it: the sum of their level weights
    first: tuple[int, int]  # (invocation position, hit index) of the first line naming it


@dataclass
class FollowPlan:
    """The calls to make for the followed dependencies, and the dependencies the bounds left out
    (with the bound that did)."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    followed: list[Dependency] = field(default_factory=list)
    left_out: list[tuple[Dependency, str]] = field(default_factory=list)

    @property
    def missing_info(self) -> list[MissingInfo]:
        """A dependency an error line names that was not checked is a gap, and is named as one."""
        return [
            MissingInfo(text=f"{d.caller} 的错误日志提到了 {d.service}；{bound}，本次未检查 {d.service}。", tool_name=QUERY_LOGS)
            for d, bound in self.left_out[:MAX_FOLLOWED]
        ]


def _hits(invocation: ToolInvocation) -> list[LogHit]:
    data = read_result(invocation.tool_name, invocation.agent_result)
    return data.hits if isinstance(data, LogsResult) else []


def _queried(invocations: Sequence[ToolInvocation], resolution: Resolution) -> set[str]:
    """The services this run already checks: the resolution's, and any a call was made for."""
    called = {str(inv.request["service"]) for inv in invocations if inv.request.get("service")}
    return called | set(resolution.coverage.checked)


def find_dependencies(invocations: Sequence[ToolInvocation], resolution: Resolution) -> list[Dependency]:
    """Catalogued services named by the WARN-or-worse lines of the READY query_logs invocations,
    other than the services this run already checks, the strongest first. A dependency named only
    by warnings needs as many of them as a warning burst does (`log_clusters.MIN_COUNT`)."""
    if not resolution.catalogue.available:
        return []
    queried = {name.lower() for name in _queried(invocations, resolution)}
    tally: dict[str, dict[str, Any]] = {}
    for position, invocation in enumerate(invocations):
        if invocation.tool_name != QUERY_LOGS or invocation.lifecycle != "READY":
            continue
        caller = str(invocation.request.get("service") or "")
        hits = _hits(invocation)
        # The service itself and its instances (the hosts its own lines come from).
        own = {hit.host.lower() for hit in hits} | {caller.lower()}
        for index, hit in enumerate(hits):
            level = hit.level.upper()
            if level not in LEVEL_WEIGHT:
                continue
            named: list[str] = []
            for host in named_hosts(hit.message):
                service = None if host in own else _catalogued(host, resolution)
                if service is not None and service.lower() not in own | queried and service not in named:
                    named.append(service)
            for service in named:
                entry = tally.setdefault(service, {
                    "caller": caller, "invocation_id": invocation.invocation_id, "raw_path": f"hits[{index}]",
                    "first": (position, index), "weight": 0.0, "errors": 0, "warnings": 0,
                })
                entry["weight"] += LEVEL_WEIGHT[level]
                entry["warnings" if level == "WARN" else "errors"] += 1
    dependencies = [
        Dependency(service=service, caller=entry["caller"], invocation_id=entry["invocation_id"],
                   raw_path=entry["raw_path"], weight=entry["weight"], first=entry["first"])
        for service, entry in tally.items()
        if entry["errors"] or entry["warnings"] >= MIN_COUNT["WARN"]
    ]
    return sorted(dependencies, key=lambda d: (-d.weight, d.first, d.service))


def follow_calls(dependency: Dependency, calls: Calls) -> list[tuple[str, dict[str, Any]]]:
    """The dependency's query_metrics and query_logs calls: the caller's own planned calls of
    those tools with the service replaced (`contains` dropped); a tool the caller's plan did not
    call is called over the window of the caller's query_logs call."""
    # The caller's first planned call of each tool (reversed: an earlier call overwrites a later one).
    own = {name: dict(arguments) for name, arguments in reversed(calls)
           if str(arguments.get("service", "")) == dependency.caller}
    window = {key: own[QUERY_LOGS][key] for key in ("start", "end") if key in own.get(QUERY_LOGS, {})}
    follow: list[tuple[str, dict[str, Any]]] = []
    for tool_name in FOLLOWED_TOOLS:
        arguments = own.get(tool_name)
        if arguments is None:
            if len(window) < 2:
                continue
            arguments = dict(window)
        for key in _CALLER_ONLY_ARGUMENTS:
            arguments.pop(key, None)
        follow.append((tool_name, {**arguments, "service": dependency.service}))
    return follow


def plan_follow_up(calls: Calls, invocations: Sequence[ToolInvocation],
                   resolution: Resolution | None, max_calls: int | None = None) -> FollowPlan:
    """The follow-up calls for the dependencies the invocations' error lines name, within the
    bounds: MAX_FOLLOWED services, the per-question limit on checked services, and `max_calls`
    (single-ReAct: the steps left). One hop only: the followed services' own lines are not
    followed in turn. Without a resolution (a caller that resolves no names) nothing is followed."""
    if resolution is None:
        return FollowPlan()
    plan = FollowPlan()
    limit = resolution.coverage.limit
    room = MAX_FOLLOWED if not limit else max(0, min(MAX_FOLLOWED, limit - len(_queried(invocations, resolution))))
    budget = max_calls
    for dependency in find_dependencies(invocations, resolution):
        follow = follow_calls(dependency, calls)
        if not follow:
            continue  # the caller's window is unknown: nothing to ask over
        if len(plan.followed) >= room:
            by_limit = limit and room < MAX_FOLLOWED
            plan.left_out.append((dependency, f"每个问题最多检查 {limit} 个服务" if by_limit else f"每次最多追查 {MAX_FOLLOWED} 个依赖服务"))
        elif budget is not None and len(follow) > budget:
            plan.left_out.append((dependency, "剩余步骤不足"))
        else:
            plan.followed.append(dependency)
            plan.calls += follow
            if budget is not None:
                budget -= len(follow)
    return plan


def follow_dependencies(calls: Calls, invocations: Sequence[ToolInvocation],
                        call_tool: object, max_calls: int | None = None) -> FollowPlan:
    """`plan_follow_up` with the service resolution the executor's `call_tool` carries (the
    ToolRunner's `resolution`); a call_tool without one follows nothing."""
    return plan_follow_up(calls, invocations, getattr(call_tool, "resolution", None), max_calls)
