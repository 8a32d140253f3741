"""Problems in forge/chains.json, all of them at once, each with "did you mean" where a name or
key is close to a known one: pydantic's errors in words, and chains naming agents that are not
defined.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from sandbox_runner.console.ansi import strip_escapes
from sandbox_runner.errors import AgentNotFoundError, ConfigError, UsageError
from sandbox_runner.paths import shorten
from sandbox_runner.programs import find_program

FRIENDLY = {
    "greater_than": "must be a positive number",
    "greater_than_equal": "must not be negative",
    "extra_forbidden": "unknown key",
    "missing": "is required",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "too_short": "must not be empty",
    "string_too_short": "must not be empty",
    "bool_type": "must be true or false",
    "string_pattern_mismatch": "must be a positive size like 512m or 2g",
    "finite_number": "must be a finite number",
}
_INT_FIELDS = {"iterations", "maxTurns", "pidsLimit"}
_SHOWN_PROBLEMS = 50


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'x'?)` when one of `choices` is close to `word`, else ``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def problems_error(shown: str, problems: Sequence[str]) -> ConfigError:
    """One error listing every problem: a single one on one line, several one per line."""
    clean = [strip_escapes(p, keep="") for p in dict.fromkeys(problems)]
    if len(clean) == 1:
        return ConfigError(f"{shown}: {clean[0]}")
    lines = [f"  {p}" for p in clean[:_SHOWN_PROBLEMS]]
    if len(clean) > _SHOWN_PROBLEMS:
        lines.append(f"  … and {len(clean) - _SHOWN_PROBLEMS} more")
    return ConfigError(f"{shown}: {len(clean)} problems:\n" + "\n".join(lines))


def dotted(loc: Iterable[int | str]) -> str:
    """`("chains", "ralph", "steps", 1)` → `chains.ralph.steps[1]`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def validation_problems(exc: ValidationError, model: type[BaseModel]) -> list[str]:
    """Every error pydantic found, in words, one per place."""
    problems: dict[str, str] = {}
    errors = exc.errors()
    deeper = {tuple(e["loc"][:n]) for e in errors for n in range(len(e["loc"]))}
    for error in errors:
        if error["type"] == "too_short" and tuple(error["loc"]) in deeper:
            continue  # a list whose entries are all wrong is not also "empty"
        where = dotted(error["loc"]) or "(top level)"
        if where not in problems:
            problems[where] = f"{where}: {_message(error, model)}"
    return list(problems.values())


def _message(error: Any, model: type[BaseModel]) -> str:
    kind, ctx, loc = error["type"], error.get("ctx") or {}, tuple(error["loc"])
    message: str = FRIENDLY.get(kind, error["msg"][:1].lower() + error["msg"][1:])
    if kind in ("greater_than", "int_type") and loc and loc[-1] in _INT_FIELDS:
        message = "must be a positive integer"
    elif kind == "less_than_equal":
        message = f"must be at most {ctx['le']:,}"
    elif kind == "too_long":
        message = f"must have at most {ctx['max_length']:,} entries"
    elif kind == "value_error":
        message = str(ctx.get("error", message))
    elif kind == "extra_forbidden" and loc:
        message += did_you_mean(str(loc[-1]), _keys_at(model, loc[:-1]))
    return message


def _keys_at(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The keys the object at `loc` may have (empty when `loc` leads to no model)."""
    node: Any = model
    for part in loc:
        node = _unwrap(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = next(
                (f for n, f in node.model_fields.items() if part in (n, f.alias)),
                None,
            )
            if field is None:
                return []
            node = field.annotation
        elif typing.get_origin(node) in (dict, tuple, list):
            node = typing.get_args(node)[-1 if typing.get_origin(node) is dict else 0]
        else:
            return []
    node = _unwrap(node)
    if isinstance(node, type) and issubclass(node, BaseModel):
        return [f.alias or n for n, f in node.model_fields.items()]
    return []


def _unwrap(annotation: Any) -> Any:
    """`X | None` → `X`."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def undefined_agents(raw: Any, chains: Iterable[str] | None = None) -> list[str]:
    """Steps naming an agent that is not defined, looks like a typo of one that is, and is no
    program on PATH (a name that is not close to a defined one may be a program installed only in
    the sandbox image). Works on the raw JSON, so it reports alongside the file's other problems.
    """
    if not isinstance(raw, dict):
        return []
    agents = raw.get("agents") if isinstance(raw.get("agents"), dict) else {}
    all_chains = raw.get("chains") if isinstance(raw.get("chains"), dict) else {}
    assert isinstance(agents, dict) and isinstance(all_chains, dict)
    problems = []
    for name in all_chains if chains is None else chains:
        steps = (
            all_chains.get(name, {}).get("steps")
            if isinstance(all_chains.get(name), dict)
            else None
        )
        for i, step in enumerate(steps if isinstance(steps, list) else []):
            agent = step.get("agent") if isinstance(step, dict) else None
            if not isinstance(agent, str) or agent in agents or "/" in agent:
                continue
            hint = did_you_mean(agent, [str(a) for a in agents])
            if hint and find_program(agent) is None:
                problems.append(
                    f"chains.{name}.steps[{i}].agent: agent {agent!r} is not defined under "
                    f"'agents' and not on PATH{hint}"
                )
    return problems


def check_dsl_agents(agents: Iterable[str], defined: Collection[str]) -> None:
    """Refuse a DSL step's agent that is a mistake rather than a program, alike with and
    without --sandbox: a trailing `:suffix` that is no count after a defined agent's name, or
    a name close to a defined agent's that is no program on PATH (the rule of
    `undefined_agents`)."""
    for agent in agents:
        if agent in defined or "/" in agent:
            continue
        head, sep, tail = agent.rpartition(":")
        if sep and head in defined:
            raise UsageError(
                f"step {shorten(agent)!r}: {shorten(tail)!r} is not an iteration count (ASCII "
                f"digits, e.g. '{shorten(head)}:3'); did you mean '{shorten(head)}:N'?"
            )
        hint = did_you_mean(agent, defined)
        if hint and find_program(agent) is None:
            raise AgentNotFoundError(
                f"Agent {shorten(agent)!r} is not defined under 'agents' and not on PATH{hint}"
            )
