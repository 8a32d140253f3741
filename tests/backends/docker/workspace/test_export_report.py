"""The script's report lines are taken out of the agent's stderr, split anywhere: the closing
one, and the one it prints before the agent starts."""

from __future__ import annotations

import pytest

from sandbox_runner.backends.docker.workspace.export import PreparedLine, ReportFilter

LINE = b"fks-export 0123abcd before=a b\tafter=a c\tend=1\n"


@pytest.mark.parametrize("cut", [1, 3, 11, 12, 20, len(LINE) - 1])
def test_report_line_is_removed_wherever_chunks_split(cut: int) -> None:
    data = b"agent says hi\nno newline at the end" + LINE
    split = len(data) - len(LINE) + cut
    f = ReportFilter("0123abcd")
    shown = f.feed(data[:split]) + f.feed(data[split:]) + f.finish()
    assert shown == b"agent says hi\nno newline at the end"
    export = f.export()
    assert export is not None and export.changed is True and export.complete


def test_output_is_never_held_back_without_a_possible_start_of_the_line() -> None:
    f = ReportFilter("0123abcd")
    assert f.feed(b"progress 50%\n") == b"progress 50%\n"
    assert f.feed(b"almost fks-exp") == b"almost "  # could be the line: held
    assert f.feed(b"ort-like text\n") == b"fks-export-like text\n"
    assert f.export() is None  # the line never came: the host reads the export itself


def test_a_bundle_or_no_end_means_the_export_is_fetched() -> None:
    for report in (b"end=1\tbundle=1\n", b"before=x\n"):
        f = ReportFilter("n")
        f.feed(b"fks-export n " + report)
        assert f.export() is None


PREPARED = b"fks-prepared 0123abcd 4063841:1795416902.018172684:1606671\n"


@pytest.mark.parametrize("cut", [1, 5, 13, 21, len(PREPARED) - 1])
def test_prepared_line_is_taken_wherever_chunks_split(cut: int) -> None:
    data = PREPARED + b"the agent starts\n"
    f = PreparedLine("0123abcd")
    shown = f.feed(data[:cut]) + f.feed(data[cut:]) + f.finish()
    assert shown == b"the agent starts\n"
    assert f.base_index == "4063841:1795416902.018172684:1606671"


def test_only_the_first_prepared_line_counts() -> None:
    """The agent can read the nonce and print the line too, but only after the script's."""
    f = PreparedLine("n")
    forged = b"fks-prepared n 1:1.000000000:1\n"
    assert f.feed(b"fks-prepared n kept\n" + forged) == forged
    assert f.value == "kept" and f.base_index is None
    assert f.feed(forged) == forged and f.value == "kept"


@pytest.mark.parametrize("value", [b"1:2:3", b"x" * 40, b"1:1.000000000:1 extra", b""])
def test_a_malformed_base_index_is_none(value: bytes) -> None:
    f = PreparedLine("n")
    f.feed(b"fks-prepared n " + value + b"\n")
    assert f.base_index is None
