"""One templating mechanism (shared/log_templates.py, on drain3) for log clusters and the causal
check's rarity groups, and which log clusters are evidence (log_clusters.is_significant)."""

from __future__ import annotations

import random

from services.executor.log_clusters import cluster_hits, is_significant, message_template
from shared.core.grounding.causal_link import Corpus
from shared.core.tool_results import LogHit
from shared.log_templates import mask, templates


def test_lines_that_differ_in_ids_and_numbers_share_a_template() -> None:
    first = "order 7f3a9c12e0 for user u48213 failed after 300 ms (trace 0b3c1d2e-4f5a-4b6c-8d7e-9f0a1b2c3d4e)"
    second = "order 9e8d7c6b5a for user u00017 failed after 12 ms (trace 11111111-2222-3333-4444-555555555555)"
    assert mask(first) == mask(second) == message_template(first)
    assert "7f3a9c12e0" not in mask(first) and "300" not in mask(first) and "u48213" not in mask(first)
    assert "order" in mask(first) and "failed after" in mask(first)


def test_a_word_that_varies_between_otherwise_equal_lines_becomes_a_parameter() -> None:
    lines = ["user alice logged in from gateway", "user bob logged in from gateway", "cache warmed in 3 s"]
    found = templates(lines)
    assert found[0] == found[1] == "user <*> logged in from gateway"
    assert found[2] == "cache warmed in <N> s"


def test_templates_are_deterministic_whatever_the_order_of_the_lines() -> None:
    lines = [f"request {k} served by worker-{k % 3} in {k * 7} ms" for k in range(40)]
    lines += ["configuration reloaded from /etc/app/app.yaml", "user carol logged in", "user dave logged in"]
    expected = dict(zip(lines, templates(lines)))
    for seed in range(5):
        shuffled = lines[:]
        random.Random(seed).shuffle(shuffled)
        assert dict(zip(shuffled, templates(shuffled))) == expected
    assert templates(lines) == templates(list(lines))  # and again, from the cache


def test_one_error_line_is_evidence_and_ranked_never_dropped() -> None:
    hits = [LogHit(ts=f"2026-11-29T10:{k:02d}:00Z", level="WARN", message=f"slow query {k} ms") for k in range(3)]
    hits.append(LogHit(ts="2026-11-29T10:30:00Z", level="ERROR", message="payment declined: card store unreachable"))
    clusters = cluster_hits(hits)
    error = next(c for c in clusters if c.level == "ERROR")
    assert error.count == 1 and is_significant(error, 60.0)
    assert clusters[0] is error  # an error outranks warnings
    warnings = next(c for c in clusters if c.level == "WARN")
    assert not is_significant(warnings, 60.0)  # three warnings in an hour: background noise


def test_fatal_critical_and_panic_are_errors_and_a_line_of_unknown_level_is_none() -> None:
    for level in ("FATAL", "CRITICAL", "panic"):
        [cluster] = cluster_hits([LogHit(ts="2026-11-29T10:00:00Z", level=level, message="out of memory")])
        assert cluster.level == "FATAL" and is_significant(cluster, 60.0)
    assert cluster_hits([LogHit(ts="2026-11-29T10:00:00Z", level="UNKNOWN", message="Exception in thread main")]) == []


def test_warnings_keep_a_rate_threshold() -> None:
    burst = [LogHit(ts=f"2026-11-29T10:{k:02d}:00Z", level="WARN", message=f"retry {k} of call") for k in range(8)]
    [cluster] = cluster_hits(burst)
    assert is_significant(cluster, 60.0)
    assert not is_significant(cluster, 600.0)  # eight in ten hours is no burst


def test_the_causal_corpus_groups_a_series_points_as_one_and_keeps_rarity() -> None:
    points = [f"pay-svc cpu_usage_percent={40 + k}.0% at 2026-11-29T10:{k:02d}:00Z" for k in range(30)]
    texts = points + [
        "pay-svc 在 2026-11-29T09:58:00Z 发布 ruleSet=v5",
        "2026-11-29T10:01:00Z ERROR pay-svc host=pay-0 rule ruleSet=v5 rejected the order",
        "2026-11-29T10:02:00Z WARN pay-svc host=pay-0 queue depth high",
        "2026-11-29T10:03:00Z INFO pay-svc host=pay-0 cache warmed",
    ]
    corpus = Corpus.of(texts, ["pay-svc"])
    assert len(corpus.groups) == 5  # the thirty points are one group
    assert corpus.is_rare("ruleset=v5") and not corpus.is_rare("pay-svc")
