"""Whether a recommended action changes the running system, decided by our code (DESIGN §5: state-
changing actions always carry 需人工确认, whatever a model says about them).

The list is closed and errs towards confirmation: a verb counts wherever it appears, negated or not
(无需重启 still names a restart; an unneeded 需人工确认 costs a reader a glance, a missing one can
cost an outage). The only exception is a verb used as the name of a record or a moment that is
read, not done: 发布记录, 重启次数, 回滚前后, 发布时间 (_READ_NOUN_SUFFIXES), or a noun after 的
coordinated with another (前后的发布与配置变更) — and an action that executes a procedure
(按发布流程回滚) still counts by its other verb.
Read-only verbs (检查, 查看, 核对, 确认, 对比, 观察, 排查, 分析 …) are not in the list.
"""

from __future__ import annotations

import re

from shared.core.grounding.number_words import normalise

STATE_CHANGING_ACTIONS: tuple[str, ...] = (
    # data
    "删除", "删掉", "清空", "清理数据", "清理", "清除", "截断", "执行 sql", "执行sql", "执行脚本", "重建索引", "修复数据",
    # processes and capacity
    "重启", "重新启动", "滚动重启", "回滚", "回退", "扩容", "缩容", "扩缩容", "下线", "上线", "停止", "停用", "停机", "关闭",
    "关停", "杀掉", "杀死", "终止", "重置", "重建", "驱逐", "摘除", "隔离", "封禁", "禁用", "启用", "开启",
    # configuration and releases
    "修改配置", "变更配置", "调整配置", "更改配置", "修改", "更改", "调整", "调大", "调小", "调高", "调低", "替换", "更换",
    "更新", "重新加载", "发布", "部署", "升级", "降级", "迁移", "打补丁",
    # traffic
    "切流", "切换流量", "流量切换", "主从切换", "故障转移", "切换", "限流", "熔断",
    # English
    "drop", "delete", "truncate", "restart", "reboot", "rollback", "roll back", "revert", "scale", "scale up",
    "scale out", "scale down", "scale in", "failover", "fail over", "shutdown", "shut down", "stop", "disable",
    "enable", "purge", "flush", "kill", "terminate", "redeploy", "deploy", "release", "migrate", "reset", "evict",
    "drain", "cordon", "patch", "upgrade", "downgrade", "modify", "reload", "apply", "rotate", "replace", "throttle",
)
"""Every verb (or verb phrase) that changes data, configuration, capacity,
traffic or the processes of a running system. Chinese entries match as substrings; English ones
as whole words with their inflections (restart, restarts, restarted, restarting)."""
READ_ONLY_VERBS: tuple[str, ...] = (
    "检查", "查看", "核对", "确认", "对比", "观察", "排查", "分析", "评估", "参考", "查询", "监控", "关注", "复核", "定位",
    "导出", "check", "inspect", "review", "verify", "compare", "observe", "investigate", "analyze", "monitor",
)
"""Documentation of what is deliberately absent from the list above."""
# A verb followed by one of these names a record or a moment that is read: 发布记录, 重启次数.
_READ_NOUN_SUFFIXES = ("记录", "历史", "日志", "时间", "时间点", "次数", "事件", "原因", "情况", "前后", "内容", "单",
                       "说明", "策略", "频率", "状态")


_INFLECTION = r"(?:s|es|ed|d|ing|ping|ped|ting)?"


def _pattern(entry: str) -> str:
    if entry.isascii():
        first, *rest = entry.split()  # a phrasal verb inflects its verb: rolled back, scaling out
        verb = re.escape(first[:-1]) + "(?:e|es|ed|ing)" if first.endswith("e") else re.escape(first) + _INFLECTION
        words = r"\s+".join([verb, *(re.escape(w) for w in rest)])
        return rf"(?<![a-z]){words}(?![a-z])"
    return re.escape(entry).replace(r"\ ", r"\s*")


_ACTION = re.compile("|".join(_pattern(e) for e in sorted(STATE_CHANGING_ACTIONS, key=len, reverse=True)))
_READ_NOUN = re.compile(r"\s*(?:" + "|".join(sorted(_READ_NOUN_SUFFIXES, key=len, reverse=True)) + ")")
_COORDINATED = re.compile(r"\s*(?:与|和|及|以及|、)")


def _read_as_noun(text: str, match: re.Match[str]) -> bool:
    """发布记录, 重启次数; 前后的发布与配置变更 (after 的, coordinated with a noun)."""
    if _READ_NOUN.match(text, match.end()):
        return True
    return text[:match.start()].rstrip().endswith("的") and _COORDINATED.match(text, match.end()) is not None


def state_changing_verbs(text: str) -> list[str]:
    """The state-changing actions the text names, as written (normalised), in order."""
    normal = normalise(text)
    return [m.group(0) for m in _ACTION.finditer(normal) if not _read_as_noun(normal, m)]


def needs_confirmation(text: str) -> bool:
    """The action changes the running system: it must carry 需人工确认."""
    return bool(state_changing_verbs(text))
