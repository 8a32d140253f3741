"""Which prompt a step gets (CLI > step > chain > agent default > none) and the mode-awareness text.

Prompt files are read again at every iteration, so a user can tune a prompt mid-run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sandbox_runner.agentclis.events import MARKER as MARKER  # where it was always found
from sandbox_runner.errors import ConfigError, UsageError
from sandbox_runner.paths import inside_project, path_kind, read_in_project

# `claude -p` needs some input; a step with no prompt gets this, and its instructions do the rest.
NO_PROMPT_TEXT = "Do the work your instructions describe."

MODE_AWARENESS = f"""# How you are being run

You are running headless, launched by fks, an orchestrator that runs coding agents unattended.
There is no human watching this session and nobody will answer questions.

- Never ask questions or wait for confirmation: decide sensibly, note the decision, and go on.
- Do not use interactive features (editors, pagers, prompts that wait for input).
- Your context is fresh every iteration. Keep all state in files and in git: read the
  current state first, then do the next piece of work.
- Commit your work with git, with clear messages, before you finish.
- {MARKER} on a line of its own means "this step's whole job is finished". Print it only
  then. If work remains, just stop: you will be started again with a fresh context.

"""


@dataclass(frozen=True)
class PromptSource:
    """Where a step's prompt comes from; `read()` gives the text for one iteration."""

    origin: str
    """`--prompt`, `--prompt-file`, `step`, `chain`, `agent default`, or `none`."""
    text: str | None = None
    file: Path | None = None

    def read(self) -> str | None:
        """The prompt now (files are re-read); an empty prompt means no prompt."""
        if self.file is not None:
            try:
                content = read_in_project(self.file, f"prompt file ({self.origin})")
            except FileNotFoundError:
                raise ConfigError(
                    f"prompt file '{self.file}' ({self.origin}) does not exist"
                ) from None
            except OSError as exc:
                raise ConfigError(
                    f"cannot read prompt file '{self.file}': {exc.strerror}"
                ) from None
            return content or None
        return self.text or None

    def describe(self) -> str:
        """For --dry-run: where the prompt comes from."""
        if self.file is not None:
            return f"{self.origin} file {self.file}"
        return self.origin


NO_PROMPT = PromptSource(origin="none")


def resolve_prompt(
    *,
    cwd: Path,
    cli_prompt: str | None,
    cli_prompt_file: Path | None,
    levels: list[tuple[str, str | None, str | None]],
) -> PromptSource:
    """First match wins: CLI, then `levels` in order (each `(origin, inline, file)`).

    At each level the inline prompt beats the file; an empty inline prompt counts as unset.
    """
    if cli_prompt and cli_prompt_file:
        raise UsageError("give either --prompt or --prompt-file, not both")
    if cli_prompt:
        return PromptSource(origin="--prompt", text=cli_prompt)
    if cli_prompt_file is not None:
        return PromptSource(
            origin="--prompt-file", file=_existing(cwd, str(cli_prompt_file), "--prompt-file")
        )
    for origin, inline, file in levels:
        if inline:
            return PromptSource(origin=origin, text=inline)
        if file:
            return PromptSource(origin=origin, file=_existing(cwd, file, f"{origin} promptFile"))
    return NO_PROMPT


def _existing(cwd: Path, ref: str, what: str) -> Path:
    # Absolute but not resolved: a symlink is checked each time the file is read.
    path = Path(os.path.normpath(cwd / ref))
    inside_project(path, what)
    kind = path_kind(path, what, ConfigError)
    if kind == "dir":
        raise ConfigError(f"{what} '{ref}' is a directory; give the prompt file inside it")
    if kind != "file":
        raise ConfigError(f"{what} '{ref}' does not exist (looked for {path})")
    return path
