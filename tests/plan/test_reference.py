"""The settings reference in docs/configuration.md: generated from the schema, complete, current."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from pathlib import Path

from pydantic import BaseModel

from sandbox_runner.plan.config import ChainsConfig
from sandbox_runner.plan.reference import BEGIN, END, REGENERATE, config_json_schema, render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _block(text: str) -> str:
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip("\n") + "\n"


def _rows(reference: str) -> dict[str, list[str]]:
    """Setting path → its cells (type, default, description)."""
    rows = {}
    for line in reference.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> set[type[BaseModel]]:
    """`model` and every model its fields hold (in lists, maps and optionals too)."""
    seen.add(model)
    for field in model.model_fields.values():
        stack: list[object] = [field.annotation]
        while stack:
            kind = stack.pop()
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                if kind not in seen:
                    _models(kind, seen)
            else:
                stack.extend(typing.get_args(kind))
    return seen


def test_the_page_holds_the_reference_the_schema_gives_now() -> None:
    written = _block(PAGE.read_text(encoding="utf-8"))
    assert written == render(config_json_schema()), (
        "docs/configuration.md's settings reference is out of date with the config models; "
        f"regenerate it with {REGENERATE} (python -m sandbox_runner.plan.reference docs/configuration.md)"
    )


def test_every_field_of_every_model_is_a_row_with_its_default() -> None:
    rows = _rows(_block(PAGE.read_text(encoding="utf-8")))
    for model in _models(ChainsConfig, set()):
        names = {(field.alias or name): field for name, field in model.model_fields.items()}
        # The model is listed once, at one prefix (the others say "keys as …"); another model
        # with the same field names (forge.agents, forge.prompts) has other descriptions.
        prefixes = {path[: -len(n)] for path in rows for n in names if path.endswith(n)}
        homes = [
            p
            for p in prefixes
            if all(p + n in rows for n in names)
            and all(
                " ".join((f.description or "").split()) in rows[p + n][2] for n, f in names.items()
            )
        ]
        assert homes, f"{model.__name__}: not every field is in the reference"
        for name, field in names.items():
            default = field.get_default(call_default_factory=True)
            shown = rows[homes[0] + name][1]
            if field.is_required():
                assert shown == "required", name
            elif isinstance(default, str | int | float | list | tuple) and default is not None:
                assert (
                    shown
                    == f"`{json.dumps(list(default) if isinstance(default, tuple) else default)}`"
                ), name
            if field.description:
                assert " ".join(field.description.split()) in rows[homes[0] + name][2], name


def test_a_setting_used_in_several_places_is_described_once() -> None:
    rows = _rows(render(config_json_schema()))
    assert "sandbox.memory" in rows
    assert not any(path.endswith(".sandbox.memory") for path in rows)
    assert "`sandbox.…`" in rows["chains.<name>.sandbox"][0]
    assert rows["chains.<name>.steps[].iterations"][0] == "integer (> 0, ≤ 10000)"


def test_the_generator_rewrites_a_stale_page(tmp_path: Path) -> None:
    page = tmp_path / "configuration.md"
    page.write_text(f"# Before\n\n{BEGIN}\n| stale |\n{END}\n\nAfter.\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "sandbox_runner.plan.reference", str(page)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# Before\n") and text.endswith(f"{END}\n\nAfter.\n")
    assert _block(text) == _block(PAGE.read_text(encoding="utf-8"))
