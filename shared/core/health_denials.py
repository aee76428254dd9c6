"""What no shown text may say while an evidence call failed (DESIGN §3: "a
failed or unreachable backend can never read as 「未发现异常」"): a denial of anomalies or a verdict
on health, in the ways a writer — or a model rephrasing our text — says it.

One vocabulary for every reader: the single-ReAct answer guard (a Draft that says it while a call
failed is not released), the embedded single-ReAct Draft (its side texts that say it are left out)
and the model composer's output check (a rephrasing that says it falls back to the template).

Denials of a whole state (「没有异常」, 「未见异常」, 「各项指标均正常」, 「运行正常」, 「一切正常」,
「健康」, 「没有问题」, 「可以排除」 …) count; a finding about one series does not: 「未见明显升高」
names what was read and how, 「没有 ERROR/WARN 日志」 is what a search returned, 「不正常」 and
「无法确认」 deny nothing, and 「健康检查」 is a thing, not a verdict.
"""

from __future__ import annotations

import re
import unicodedata

_NEGATION = r"(?:未|没有?|无|并无|并未|不存在|查无)"
_SEEN = r"(?:发现|显示|出现|看到|见到?|检测到|观察到|查到|查出|监测到)?了?"
_ANY = r"(?:任何|明显|显著|什么)?的?"
_TROUBLE = r"(?:异常|问题|故障|(?:错误|报错|告警)(?!率|码|数|日志|级别|比例))"
# 「均正常」 「运行正常」 「一切正常」; never 「不正常」 「恢复正常」 (the latter states a recovery seen).
_WHOLE = r"(?:一切|运行|运转|均|都|全部|全都|皆|整体|完全|各项|状态|表现|基本|大体|总体|服务|指标)"
DENIAL = re.compile(
    rf"{_NEGATION}{_SEEN}{_ANY}{_TROUBLE}"
    rf"|{_WHOLE}(?:均|都|也|皆)?(?:属|为|是)?正常"
    r"|正常运[行转]|(?<!不)健康(?!检查|探针|度检查)|(?:没|无)(?:啥|什么)?问题|可以排除|已(?:被)?排除"
    r"|(?<![a-z])(?:no (?:anomal\w*|issues?|problems?|errors?)|(?:all|looks?|seems?) (?:good|fine|normal|clear)"
    r"|healthy|nothing (?:abnormal|wrong))(?![a-z])",
    re.IGNORECASE,
)


def denials(text: str) -> list[str]:
    """The phrases of `text` that deny an anomaly or pass a verdict on health (empty: none)."""
    normal = unicodedata.normalize("NFKC", text)
    return [match.group(0) for match in DENIAL.finditer(normal)]
