"""The README and docs/ stay true: links resolve, the README stays short, named paths and tests
exist."""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from itertools import pairwise
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from sandbox_runner.outcomes import Exit, IterationEnd, StepEnd

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted([README, ROOT / "BENCHMARKS.md", *(ROOT / "docs").glob("*.md")])
README_LIMIT = 15_000
WALK = re.compile(r"<!-- BEGIN WALK.*?-->(.*?)<!-- END WALK -->", re.S)


def _tokens(page: Path) -> list[Token]:
    return MarkdownIt("commonmark").enable("table").parse(page.read_text(encoding="utf-8"))


def _links(page: Path) -> list[str]:
    """Every link target of the page's Markdown (code blocks and code spans hold none)."""
    found = []
    for token in _tokens(page):
        for child in token.children or []:
            if child.type == "link_open":
                found.append(str(child.attrs["href"]))
    return found


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    kept = "".join(c for c in heading.lower() if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


@cache
def _anchors(page: Path) -> set[str]:
    tokens, found, seen = _tokens(page), set(), dict[str, int]()
    for heading, inline in pairwise(tokens):
        if heading.type != "heading_open":
            continue
        text = "".join(
            c.content for c in inline.children or [] if c.type in ("text", "code_inline")
        )
        slug = _slug(text)
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def _broken(page: Path) -> list[str]:
    """The page's relative links whose file, or heading anchor in a Markdown file, is missing."""
    broken = []
    for href in _links(page):
        parts = urlsplit(href)
        if parts.scheme or parts.netloc:
            continue  # an address on the web: not checked here
        target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not target.exists():
            broken.append(f"{href}: no file {target}")
        elif parts.fragment and target.suffix == ".md" and parts.fragment not in _anchors(target):
            broken.append(f"{href}: no heading with anchor #{parts.fragment} in {target.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_and_anchor_that_exist(page: Path) -> None:
    broken = _broken(page)
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_a_missing_file_or_anchor_is_reported_and_code_is_not_a_link(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## The `fks forge` part\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[a](other.md#the-fks-forge-part) [b](other.md#gone) [c](missing.md) [d](#here)\n"
        "[e](https://example.com/x.md) `[f](nowhere.md)`\n\n    [g](nowhere.md)\n\n## Here\n",
        encoding="utf-8",
    )
    assert [line.split(":")[0] for line in _broken(page)] == ["other.md#gone", "missing.md"]


def test_the_readme_is_short_and_links_every_page() -> None:
    size = len(README.read_bytes())
    assert size <= README_LIMIT, (
        f"README.md is {size} bytes, over {README_LIMIT}: move detail to a page under docs/"
    )
    linked = {(ROOT / urlsplit(h).path).resolve() for h in _links(README)}
    unlinked = [p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in linked]
    # A sub-page may be linked from its page instead.
    unlinked = [n for n in unlinked if not any(n in _links(p) for p in PAGES if p != README)]
    assert not unlinked, f"pages no other page links: {unlinked}"


def test_the_readme_states_the_test_command_ci_runs() -> None:
    assert "./scripts/test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "    ./scripts/test\n" in README.read_text(encoding="utf-8")


def test_every_path_of_the_walk_exists() -> None:
    """Each line of the walk in docs/development.md is `N. `path` — what happens there`."""
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    walk = WALK.search(text)
    assert walk, "docs/development.md has no <!-- BEGIN WALK … --> … <!-- END WALK --> section"
    steps = [line for line in walk.group(1).splitlines() if re.match(r"\d+\. ", line)]
    assert len(steps) >= 10
    missing = []
    for line in steps:
        named = re.match(r"\d+\. `([^`]+)` — ", line)
        assert named, f"not `N. `path` — what happens there`: {line[:80]}"
        if not (ROOT / named.group(1)).exists():
            missing.append(named.group(1))
        # Paths named inside the line, relative to the package.
        for inner in re.findall(r"`([a-z_]+/[a-z_/]*\.(?:py|sh))`", line.split(" — ", 1)[1]):
            if not (ROOT / "sandbox_runner" / inner).exists():
                missing.append(inner)
    assert not missing, f"the walk names paths that do not exist: {missing}"


def _named_tests(table: str) -> list[tuple[str, str]]:
    """(file, test) of every `tests/x.py::name` (and following `::name`) in the table's last
    column; files without a folder are under tests/."""
    named = []
    for row in table.splitlines():
        if not row.startswith("| ") or row.startswith(("| An agent", "|---")):
            continue
        current = ""
        for ref in re.findall(r"`([^`]+)`", row.rsplit(" | ", 1)[1]):
            path, _, name = ref.partition("::")
            if path:
                current = path if path.startswith("tests/") else f"tests/{path}"
            named.append((current, name))
    return named


def test_every_test_the_security_model_names_exists() -> None:
    text = (ROOT / "docs" / "sandbox.md").read_text(encoding="utf-8")
    table = text[text.index("## Security model") :]
    named = _named_tests(table)
    assert len(named) > 40
    missing = [
        f"{path}::{name}"
        for path, name in named
        if not (ROOT / path).is_file()
        or (name and not re.search(rf"def {re.escape(name)}\(", (ROOT / path).read_text()))
    ]
    assert not missing, f"docs/sandbox.md's security model names tests that do not exist: {missing}"


_ENDS = re.compile(r"<!-- BEGIN (ITERATION|STEP) ENDS.*?-->\n(.*?)\n<!-- END \1 ENDS -->", re.S)


def _ends_table(rows: list[tuple[str, str, str | None]]) -> str:
    lines = ["| reason | what happened | the fix |", "| --- | --- | --- |"]
    lines += [f"| `{value}` | {text} | {fix or '-'} |" for value, text, fix in rows]
    return "\n".join(lines)


def test_the_end_reasons_docs_list_every_reason_with_its_text_and_fix() -> None:
    """docs/claude.md's tables of end reasons are the outcomes module's: paste the expected
    table this test prints when a reason, a text or a fix changed."""
    expected = {
        "ITERATION": _ends_table(
            [(m.value, m.text, m.fix) for m in IterationEnd] + [("exit_N", *Exit.ABOUT)]
        ),
        "STEP": _ends_table([(m.value, m.text, m.fix) for m in StepEnd]),
    }
    found = dict(_ENDS.findall((ROOT / "docs" / "claude.md").read_text(encoding="utf-8")))
    for kind, table in expected.items():
        assert found.get(kind) == table, f"docs/claude.md's {kind} ENDS table should be:\n{table}"
