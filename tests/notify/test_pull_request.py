"""The `pr` event the pull-request code sends: a title an agent wrote goes out inert."""

from __future__ import annotations

from fks_testing.notifysink import notify_sink

from sandbox_runner.notify import events
from sandbox_runner.notify.send import Notifier
from sandbox_runner.plan.notify import EVENTS, Level, Target


def test_a_pull_request_is_told_once_with_its_link_and_an_inert_title() -> None:
    title = "\x1b[2J@everyone Fix it\n![x](http://evil.example/p.png)" + "y" * 5000
    with notify_sink() as sink:
        notifier = Notifier((Target(0, sink.url(), "json", frozenset(EVENTS), Level.INFO),))
        sent = events.pull_request(notifier, None, url="https://github.com/o/r/pull/7", title=title)
        (post,) = sink.wait_for(1)
    assert [(d.event, d.ok) for d in sent] == [("pr", True)]
    assert post.body["title"] == "fks: pull request opened"
    assert "https://github.com/o/r/pull/7" in post.text and "\x1b" not in post.text
    assert "@\u200beveryone Fix it / ![x]" in post.text and len(post.text) < 1000
    assert events.pull_request(Notifier(), None, url="u", title="t") == []
