"""What several verbs share: error handling with the documented exit codes, and the one place
`fks forge`'s verbs turn their options into `ForgeOptions` (the options themselves are in
`options.py`).

No `from __future__ import annotations` in the CLI's modules on purpose: typer reads every
option's annotation with `get_type_hints`, and evaluating them once at import is ~10 ms
cheaper than compiling postponed strings at every start.
"""

import functools
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec

import typer

from sandbox_runner.errors import EXIT_INTERRUPTED, FksError, Interrupted

if TYPE_CHECKING:
    from sandbox_runner.commands.forge import ForgeOptions

P = ParamSpec("P")


def handled(fn: Callable[P, int | None]) -> Callable[P, None]:
    """Turn a command's return code and FksError/Ctrl-C into typer exits with documented codes."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            code = fn(*args, **kwargs)
        except FksError as exc:
            print(f"fks: {exc}", file=sys.stderr)
            raise typer.Exit(exc.exit_code) from None
        except (Interrupted, KeyboardInterrupt):
            print("fks: interrupted", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        raise typer.Exit(code or 0)

    return wrapper


def forge_options(params: Mapping[str, Any]) -> "ForgeOptions":
    """`ForgeOptions` from a `fks forge` verb's parameters as typer passed them (the verb's
    `locals()` on entry): the one place the command line becomes that object. Each parameter
    is the field of its name; `task`, the verb's argument, is none; a repeatable option
    (None when not given) becomes a tuple."""
    from sandbox_runner.commands.forge import ForgeOptions

    given = {name: value for name, value in params.items() if name != "task"}
    for name in ("tasks", "allow"):
        if name in given:
            given[name] = tuple(given[name] or ())
    return ForgeOptions(**given)
