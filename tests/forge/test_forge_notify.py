"""A forge review's verdicts and a task's landing as notifications, agent text in them inert."""

from __future__ import annotations

from pathlib import Path

import pytest
from fks_testing.forge import ANALYSIS, APPROVED, answer, commit, context, new_task
from fks_testing.notifysink import notify_sink

from sandbox_runner.forge.worker import process_task
from sandbox_runner.notify.send import Notifier
from sandbox_runner.plan.notify import Level, Target
from sandbox_runner.records.store import RunStore

HOSTILE = "\x1b]0;owned\x07\x1b[31mred\x1b[0m @channel <!here> line\nbreak " + "x" * 10_000


def test_each_review_verdict_is_sent_with_the_agents_text_inert(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = new_task(repo, "write two", capsys)
    rejected = {"approved": False, "issues": [HOSTILE], "suggestions": []}
    script = [
        answer(ANALYSIS),
        commit({"a.txt": "one\n"}),
        answer(rejected),
        commit({"a.txt": "two\n"}),
        answer(APPROVED),
    ]
    with notify_sink() as sink:
        ctx, _ = context(repo, script)
        reviews = Target(0, sink.url(), "json", frozenset({"review"}), Level.INFO)
        ends = Target(1, sink.url("json", "ends"), "json", frozenset({"run_end"}), Level.INFO)
        ctx.notifier = Notifier((reviews, ends))
        item = process_task(ctx, task_id, max_cost=None)
        posts = sink.wait_for(3)
    assert item is not None and item.status == "completed"
    first, second, landed = posts
    assert landed.path == "/ends" and f"{task_id} landed" in landed.body["title"], landed
    assert "write two" in landed.text and f"fks forge show {task_id}" in landed.text
    assert first.body["type"] == "warning" and "review rejected" in first.body["title"]
    assert second.body["type"] == "info" and "review approved" in second.body["title"]
    text = first.text
    assert "\x1b" not in text and "\x07" not in text and "redred" not in text
    assert "@\u200bchannel" in text and "<\u200b!here>" in text and "line / break" in text
    assert len(text) < 2_000
    (record,) = RunStore(repo).records()
    assert [(d.event, d.ok) for d in record.deliveries] == [
        ("review", True),
        ("review", True),
        ("run_end", True),
    ]
