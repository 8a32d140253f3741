"""A patch as highlighted HTML: its headers as a diff, the lines of each hunk in the language
of their file (chosen by its name), added and removed lines marked. pygments escapes every
character and marks tokens with CSS classes only (the packaged `run.css`); the lines given are
already neutralised (no escape, control or bidi character). pygments' lexers are slow (Python's
about 70 KB a second here): a page has its first `LANGUAGE_BYTES` of code highlighted by
language (`Budget`), the rest only marked added or removed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup, escape

LANGUAGE_BYTES = 6 * 1024
_HUNK_LINE = {"+": "add", "-": "del", " ": "ctx"}
# The languages patches are highlighted in, by file suffix (a lookup among all of pygments'
# lexers imports every one of them: most of a second).
_LEXERS = {
    "py": "python",
    "pyi": "python",
    "js": "javascript",
    "mjs": "javascript",
    "ts": "typescript",
    "tsx": "tsx",
    "jsx": "jsx",
    "go": "go",
    "rs": "rust",
    "c": "c",
    "h": "c",
    "cc": "cpp",
    "cpp": "cpp",
    "hpp": "cpp",
    "java": "java",
    "kt": "kotlin",
    "rb": "ruby",
    "php": "php",
    "sh": "bash",
    "bash": "bash",
    "json": "json",
    "yaml": "yaml",
    "yml": "yaml",
    "toml": "toml",
    "md": "markdown",
    "html": "html",
    "css": "css",
    "sql": "sql",
    "cs": "csharp",
    "swift": "swift",
    "scala": "scala",
    "lua": "lua",
}
_NAME_CHARS = 200
"""Characters of a file name matched against the lexers' file patterns."""


@dataclass
class Budget:
    """Bytes of code a page may still have lexed."""

    left: int = field(default_factory=lambda: LANGUAGE_BYTES)


def highlight_patch(lines: Iterable[str], budget: Budget) -> Markup:
    """`lines` of a unified diff (neutralised) as HTML for a `<pre class="diff">`."""
    out: list[str] = []
    block: list[str] = []
    lexer_name: str | None = None
    in_hunk = False
    for line in lines:
        if in_hunk and line[:1] in _HUNK_LINE:
            block.append(line)
            continue
        if block:
            out.append(_hunk(block, _within(budget, block, lexer_name)))
            block = []
        if line.startswith("diff "):
            in_hunk, lexer_name = False, None
        elif line.startswith("@@"):
            in_hunk = True
        elif not in_hunk and line.startswith(("--- a/", "+++ b/", '--- "a/', '+++ "b/')):
            lexer_name = _lexer_for(line[4:].strip('"')[2:][-_NAME_CHARS:]) or lexer_name
        out.append(_header(line))
    if block:
        out.append(_hunk(block, _within(budget, block, lexer_name)))
    return Markup("".join(out))  # every piece escaped by pygments or markupsafe


def _within(budget: Budget, block: list[str], lexer_name: str | None) -> str | None:
    """`lexer_name` if the budget has room for `block` (then charged for it), else None."""
    if lexer_name is None:
        return None
    budget.left -= sum(len(line) for line in block)
    return lexer_name if budget.left >= 0 else None


def _header(line: str) -> str:
    """A line outside the hunks' code: the file's header, a hunk's `@@`, `\\ No newline…`."""
    css = "gu" if line.startswith("@@") else "gh" if line[:1] not in "\\ " else "meta"
    return f'<span class="{css}">{escape(line)}</span>\n'


def _hunk(block: list[str], lexer_name: str | None) -> str:
    """The lines of a hunk (and the `@@` lines within it), in their file's language."""
    code = [line[1:] for line in block]
    highlighted = _highlighted("\n".join(code) + "\n", lexer_name)
    if highlighted is None or len(highlighted) != len(block):
        highlighted = [str(escape(text)) for text in code]
    out = []
    for line, html in zip(block, highlighted, strict=True):
        kind = _HUNK_LINE.get(line[:1], "meta")
        out.append(f'<span class="{kind}">{escape(line[:1])}{html}</span>\n')
    return "".join(out)


def _highlighted(code: str, lexer_name: str | None) -> list[str] | None:
    """`code` highlighted line by line (pygments closes its spans at each line's end)."""
    if lexer_name is None:
        return None
    from pygments import highlight  # type: ignore[import-untyped]
    from pygments.formatters import HtmlFormatter  # type: ignore[import-untyped]
    from pygments.lexers import get_lexer_by_name  # type: ignore[import-untyped]

    lexer: Any = get_lexer_by_name(lexer_name, stripnl=False, ensurenl=True)
    html: str = highlight(code, lexer, HtmlFormatter(nowrap=True))
    return html.split("\n")[:-1]


def _lexer_for(name: str) -> str | None:
    """The pygments lexer (by its alias) for a file called `name`, if it is one we know."""
    base = name.rstrip().rsplit("/", 1)[-1]
    return _LEXERS.get(base.rsplit(".", 1)[1].lower()) if "." in base else None
