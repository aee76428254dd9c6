"""lookup_knowledge: Chinese-aware tokens, Markdown chunks, BM25 ranking over the shipped runbooks
and over distractors written to fool substring matching, evidence refs, and in-run dedupe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.executor.tools.backends import BackendError, ToolBackends
from services.executor.tools.knowledge_backend import MarkdownKnowledgeBase
from services.executor.tools.knowledge_dedupe import earlier_knowledge_hits, knowledge_hit_keys, mark_deduped
from services.executor.tools.markdown_chunks import MAX_CHUNK_CHARS, parse_markdown
from services.executor.tools.registry import ToolArgumentError, ToolBackendError, ToolRegistry, build_default_registry
from services.executor.tools.search_tokenizer import tokenize
from services.executor.tools.sql_backends import DEFAULT_KNOWLEDGE_DIR
from shared.core.contracts import RetrievalDetails, ToolInvocation


def _registry(directory: Path) -> ToolRegistry:
    return build_default_registry(ToolBackends(metrics=None, logs=None, knowledge=MarkdownKnowledgeBase(directory)))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def demo_registry() -> ToolRegistry:
    return _registry(DEFAULT_KNOWLEDGE_DIR)


def _ranked_paths(registry: ToolRegistry, query: str, top_k: int = 5) -> list[str]:
    data = json.loads(registry.invoke("lookup_knowledge", {"query": query, "top_k": top_k}).agent_result)
    return [doc["path"] for doc in data["docs"]]


# --- tokens and chunks --------------------------------------------------------------------------


def test_tokens_segment_chinese_and_split_identifiers() -> None:
    tokens = tokenize("为什么 payment-service 的数据库连接池耗尽了? cpu_usage_percent OOMKilled")
    for expected in ("数据库", "连接池", "耗尽", "payment-service", "payment", "service", "cpu_usage_percent", "cpu", "usage", "oomkilled"):
        assert expected in tokens, expected
    for dropped in ("的", "了", "为什么", "?"):
        assert dropped not in tokens
    assert tokenize("the") == [] and tokenize("   ") == []


def test_markdown_is_cut_by_heading_and_paragraph_within_the_bound() -> None:
    text = (
        "---\ntitle: 标题来自 front matter\nkind: runbook\n---\n# 一级标题\n\n导语一段。\n\n"
        "## 排查步骤\n\n1. 第一步\n2. 第二步\n\n### 细节\n\n```\n# 不是标题\n```\n\n"
        "## 处置\n\n" + "\n\n".join(f"第{k}段：" + "很长的说明" * 20 for k in range(6))
    )
    document = parse_markdown(text, fallback_title="file")
    assert document.title == "标题来自 front matter" and document.front_matter["kind"] == "runbook"
    headings = [c.heading for c in document.chunks]
    assert headings[:3] == ["", "排查步骤", "排查步骤 > 细节"]
    assert "# 不是标题" in document.chunks[2].text  # a heading inside a code fence is code
    remedy = [c for c in document.chunks if c.heading == "处置"]
    assert len(remedy) > 1 and remedy[0].text.startswith("## 处置")
    assert all(len(c.text) <= MAX_CHUNK_CHARS for c in document.chunks)
    assert parse_markdown("no heading at all", fallback_title="notes").title == "notes"


# --- ranking --------------------------------------------------------------------------------------


@pytest.mark.parametrize("query, expected", [
    ("数据库连接池耗尽，获取连接超时怎么办", "runbooks/db-connection-pool-exhaustion.md"),
    ("磁盘满了写文件失败", "runbooks/disk-full.md"),
    ("消息积压越来越多，消费者一直在重平衡", "runbooks/kafka-consumer-lag.md"),
    ("证书过期了，握手失败", "runbooks/tls-certificate-expiry.md"),
    ("发布以后错误率升高要不要回滚", "runbooks/deploy-regression-5xx.md"),
    ("x509: certificate has expired or is not yet valid", "runbooks/tls-certificate-expiry.md"),
    ("java.io.IOException: No space left on device", "runbooks/disk-full.md"),
    ("HikariPool Connection is not available 连接池", "runbooks/db-connection-pool-exhaustion.md"),
    ("kafka consumer lag max.poll.interval.ms", "runbooks/kafka-consumer-lag.md"),
])
def test_the_right_runbook_ranks_first_in_chinese_english_and_mixed(demo_registry: ToolRegistry, query: str, expected: str) -> None:
    assert _ranked_paths(demo_registry, query)[0] == expected


def test_bm25_beats_substring_matching_on_written_distractors(tmp_path: Path) -> None:
    (tmp_path / "runbooks").mkdir()
    (tmp_path / "runbooks" / "target.md").write_text(
        "# 连接池耗尽排查\n\n## 症状\n\n数据库连接池耗尽，请求获取连接超时。\n\n## 处置\n\n限流批量任务，检查慢查询占用的连接。\n",
        encoding="utf-8",
    )
    # Mentions every query word once, drowned in another topic: substring matching finds it too.
    (tmp_path / "runbooks" / "long-cpu.md").write_text(
        "# CPU 使用率过高\n\n" + "CPU 使用率过高时先看线程栈和 GC。" * 40
        + "\n\n偶尔也会看到数据库、连接、池、耗尽这些词。\n",
        encoding="utf-8",
    )
    # Contains the literal query string, but only as a passing remark in a long unrelated note.
    (tmp_path / "runbooks" / "literal.md").write_text(
        "# 发布规范\n\n" + "发布前需要完成灰度、评审与回滚预案。" * 30 + "\n\n附：连接池耗尽\n",
        encoding="utf-8",
    )
    registry = _registry(tmp_path)
    query = "连接池耗尽怎么处理"
    assert _ranked_paths(registry, query)[0] == "runbooks/target.md"
    # Word order and extra words do not matter to a ranking; they would to a substring match.
    assert _ranked_paths(registry, "处理 耗尽 的 数据库 连接池")[0] == "runbooks/target.md"


def test_hits_are_chunk_refs_with_the_file_as_source(demo_registry: ToolRegistry) -> None:
    result = demo_registry.invoke("lookup_knowledge", {"query": "磁盘空间不足 No space left on device", "top_k": 2})
    assert result.evidence_status == "EVIDENCE_FOUND"
    data = json.loads(result.agent_result)
    assert len(data["docs"]) == 2 and data["docs"][0]["kind"] == "runbook"
    refs = {ref.raw_path: ref for ref in result.evidence_refs()}
    for i, doc in enumerate(data["docs"]):
        assert 1 <= len(doc["chunks"]) <= 3
        scores = [chunk["score"] for chunk in doc["chunks"]]
        assert scores == sorted(scores, reverse=True) and scores[0] == doc["score"]
        for j, chunk in enumerate(doc["chunks"]):
            ref = refs[f"docs[{i}].chunks[{j}]"]
            assert ref.text == chunk["text"] and len(ref.text) <= 500 and ref.source == doc["path"]
            assert ref.text in (DEFAULT_KNOWLEDGE_DIR / doc["path"]).read_text(encoding="utf-8")  # verbatim
    assert refs["summary"].text == f'lookup_knowledge query="磁盘空间不足 No space left on device" top_k=2: 2 documents, {len(refs) - 1} chunks'
    assert result.request_scope == {"tool": "lookup_knowledge", "query": "磁盘空间不足 No space left on device", "top_k": 2}


def test_nothing_that_scores_is_no_evidence_with_one_summary_ref(demo_registry: ToolRegistry) -> None:
    result = demo_registry.invoke("lookup_knowledge", {"query": "qwertyzzz 的 吗"})
    assert result.evidence_status == "NO_EVIDENCE"
    assert [(r.raw_path, r.text) for r in result.evidence_refs()] == [
        ("summary", 'lookup_knowledge query="qwertyzzz 的 吗" top_k=5: 0 documents, 0 chunks')]


def test_bad_arguments_and_a_missing_directory_are_tool_errors(tmp_path: Path, demo_registry: ToolRegistry) -> None:
    with pytest.raises(ToolArgumentError, match="query"):
        demo_registry.invoke("lookup_knowledge", {"query": ""})
    with pytest.raises(ToolArgumentError, match="top_k"):
        demo_registry.invoke("lookup_knowledge", {"query": "cpu", "top_k": 50})
    with pytest.raises(ToolBackendError, match="knowledge directory not found"):
        _registry(tmp_path / "absent").invoke("lookup_knowledge", {"query": "cpu"})


def test_the_index_follows_file_changes(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# 网络抖动\n\n丢包与重传。\n", encoding="utf-8")
    registry = _registry(tmp_path)
    assert _ranked_paths(registry, "证书") == []
    (tmp_path / "b.md").write_text("# 证书轮换\n\n证书到期前续期。\n", encoding="utf-8")
    assert _ranked_paths(registry, "证书") == ["b.md"]


# --- dedupe within a run -------------------------------------------------------------------------


def _as_invocation(result, invocation_id: int) -> ToolInvocation:
    return ToolInvocation(
        invocation_id=invocation_id, run_id="run-1", tool_name=result.tool_name, lifecycle="READY",
        evidence_status=result.evidence_status, agent_result=result.agent_result,
        retrieval_details=RetrievalDetails(evidence_refs=result.evidence_refs(), deduped=result.deduped),
    )


def test_a_repeated_lookup_in_a_run_is_no_new_evidence(demo_registry: ToolRegistry) -> None:
    first = demo_registry.invoke("lookup_knowledge", {"query": "证书过期 握手失败", "top_k": 2})
    seen = knowledge_hit_keys(first)
    assert len(seen) == len(first.evidence_refs()) - 1 and mark_deduped(first, set()) == first

    again = mark_deduped(demo_registry.invoke("lookup_knowledge", {"query": "证书过期 握手失败", "top_k": 2}), seen)
    assert again.deduped and again.evidence_status == "NO_EVIDENCE"
    assert [r.raw_path for r in again.evidence_refs()] == ["summary"]
    assert again.evidence_refs()[0].text.endswith("all already returned earlier in this run (deduped)")
    chunks = [c for doc in json.loads(again.agent_result)["docs"] for c in doc["chunks"]]
    assert chunks and all(c["deduped"] and c.get("text") is None for c in chunks)
    assert knowledge_hit_keys(again) == set()


def test_a_partly_repeated_lookup_keeps_only_the_new_hits_as_evidence(demo_registry: ToolRegistry) -> None:
    first = demo_registry.invoke("lookup_knowledge", {"query": "证书过期", "top_k": 1})
    earlier = earlier_knowledge_hits([_as_invocation(first, 1)])
    assert earlier == knowledge_hit_keys(first)

    wider = mark_deduped(demo_registry.invoke("lookup_knowledge", {"query": "证书过期", "top_k": 3}), earlier)
    assert not wider.deduped and wider.evidence_status == "EVIDENCE_FOUND"
    data = json.loads(wider.agent_result)
    refs = {r.raw_path for r in wider.evidence_refs()}
    for i, doc in enumerate(data["docs"]):
        for j, chunk in enumerate(doc["chunks"]):
            assert (f"docs[{i}].chunks[{j}]" in refs) == (not chunk.get("deduped"))  # raw_paths keep their places
    assert data["deduped_chunks"] == len(earlier)
    assert knowledge_hit_keys(wider).isdisjoint(earlier)
    # Hits of invocations that failed, or of other tools, are never "seen".
    failed = ToolInvocation(invocation_id=2, run_id="run-1", tool_name="lookup_knowledge", lifecycle="ERROR")
    assert earlier_knowledge_hits([failed]) == set()


def test_prebuild_builds_the_index_once_and_survives_a_missing_directory(tmp_path: Path) -> None:
    (tmp_path / "disk.md").write_text("# 磁盘告警\n\n磁盘使用率超过 90% 时清理日志。\n", encoding="utf-8")
    base = MarkdownKnowledgeBase(tmp_path)
    base.prebuild()
    built = base._index
    assert built is not None and [d.path for d in built.docs] == ["disk.md"]
    assert base.search("磁盘 告警", top_k=1, chunks_per_doc=1)[0].path == "disk.md"
    assert base._index is built  # the search used the prebuilt index

    missing = MarkdownKnowledgeBase(tmp_path / "nowhere")
    missing.prebuild()  # logged, not raised: the service still starts
    with pytest.raises(BackendError):
        missing.search("磁盘", top_k=1, chunks_per_doc=1)
