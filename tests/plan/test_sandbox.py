"""The one merge of sandbox settings: the file's, then the chain's, then the command line's."""

from __future__ import annotations

import pytest

from sandbox_runner.errors import UsageError
from sandbox_runner.plan.sandbox import SandboxSettings, merge_sandbox_settings


def test_later_layers_win_and_lists_are_joined_in_order() -> None:
    top = SandboxSettings(image="top:1", memory="2g", allow=("a.example",), env=("A",))
    chain = SandboxSettings(image="chain:1", allow=("b.example", "a.example"), env=("B",))
    merged = merge_sandbox_settings(top, None, chain, image="cli:1", allow=["c.example"])
    assert merged.image == "cli:1"
    assert merged.memory == "2g"
    assert merged.allow == ("a.example", "b.example", "c.example")
    assert merged.env == ("A", "B")


def test_no_layers_and_no_options_are_the_defaults() -> None:
    assert merge_sandbox_settings() == SandboxSettings()


@pytest.mark.parametrize(
    ("option", "given"), [("--engine", {"engine": "ftp://x"}), ("--allow", {"allow": ["a b"]})]
)
def test_a_bad_option_value_is_a_usage_error_naming_the_option(
    option: str, given: dict[str, object]
) -> None:
    with pytest.raises(UsageError) as caught:
        merge_sandbox_settings(None, **given)  # type: ignore[arg-type]
    assert str(caught.value).startswith(f"{option}: ")
    assert "\n" not in str(caught.value)
