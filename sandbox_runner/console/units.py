"""Money and byte counts as every display shows them (terminal lines, the live view, JUnit
text, `fks ui`'s pages): one precision, one grouping. Budgets the user set are shown as written
(`results.ended.usd_limit`), size limits in their unit; machine formats (--json, JUnit
properties) keep plain numbers."""

from __future__ import annotations


def usd(value: float) -> str:
    """A cost: four decimals under a dollar, where single calls cost fractions of a cent
    (`$0.0120`, `$0.0000`; `<$0.0001` for less that is not nothing), two from a dollar up, with
    thousands grouped (`$1.25`, `$1,234.50`)."""
    if abs(value) >= 1:
        return f"${value:,.2f}"
    if 0 < abs(value) < 0.00005:
        return "<$0.0001"
    return f"${value:.4f}"


def byte_count(count: int, *, more: bool = False, unit: bool = True) -> str:
    """A number of bytes, thousands grouped: `1 byte`, `12,345 bytes`, `12,345 more bytes`
    (`more`), or `12,345` under a heading that names the unit (not `unit`)."""
    grouped = f"{count:,}"
    if not unit:
        return grouped
    return f"{grouped}{' more' if more else ''} byte{'' if count == 1 else 's'}"


def byte_limit(count: int) -> str:
    """A size limit in the unit a user would set it in: `100 MiB`, `1 GiB`, else as a count
    (`100,000 bytes`)."""
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= factor and count % factor == 0:
            return f"{count // factor} {unit}"
    return byte_count(count)
