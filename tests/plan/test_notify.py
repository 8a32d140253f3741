"""`notify` entries: their forms, what is refused before anything starts, what is masked."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sandbox_runner.errors import ConfigError
from sandbox_runner.plan.config import ChainsConfig
from sandbox_runner.plan.notify import NotifyEntry, resolve_targets, url_secrets


def test_an_entry_is_a_url_alone_or_url_or_env_with_a_filter() -> None:
    config = ChainsConfig.model_validate(
        {"notify": ["ntfys://topic", {"env": "HOOK", "events": ["budget"], "level": "warning"}]}
    )
    first, second = config.notify
    assert first.url == "ntfys://topic" and len(first.events) == 7 and first.level == "info"
    assert second.env == "HOOK" and second.events == ("budget",)
    for bad in (
        {"url": "json://x", "env": "HOOK"},
        {"events": ["run_end"]},
        {"env": "1HOOK"},
        {"env": "HOOK", "events": []},
        {"env": "HOOK", "events": ["ended"]},
        {"env": "HOOK", "level": "debug"},
    ):
        with pytest.raises(ValidationError):
            NotifyEntry.model_validate(bad)


def test_a_url_variable_is_set_stays_out_of_containers_and_parses() -> None:
    entries = [NotifyEntry(env="HOOK")]
    with pytest.raises(ConfigError, match="notify\\[0\\]: environment variable HOOK is not set"):
        resolve_targets(entries, {})
    with pytest.raises(ConfigError, match=r"HOOK is in sandbox\.env"):
        resolve_targets(entries, {"HOOK": "json://h/p"}, container_env=["HOOK"])
    secret = "nosuchscheme://s3cretT0kenValue"
    with pytest.raises(ConfigError) as raised:
        resolve_targets(entries, {"HOOK": secret})
    assert "nosuchscheme URL" in str(raised.value) and "s3cret" not in str(raised.value)
    (target,) = resolve_targets(entries, {"HOOK": "ntfy://127.0.0.1:9/topic"})
    assert target.service == "ntfy" and "topic" not in repr(target)


def test_the_parts_of_a_url_that_can_be_a_token_are_masked() -> None:
    masks = url_secrets(["json://user:pa55word@hooks.example.com:8080/hook/T0KEN1234?a=b"])
    assert masks[0].startswith("json://")
    assert {"pa55word", "T0KEN1234"} <= set(masks)
    assert "hooks.example.com" not in masks and "json" not in masks
