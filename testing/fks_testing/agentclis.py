"""The real agent CLIs (Codex, Gemini CLI, OpenCode) for tests: where the test command installed
them (pinned, under `.clis/` of the checkout; `FKS_AGENT_CLIS` names another folder of their
executables), a project whose config has an agent of each kind, and `fks run` of one against
a fake of its API, isolated from the machine's own settings and keys of these CLIs.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from fks_testing.helpers import GIT_IDENTITY, Result, fks, git, init_repo, write_config

CHECKOUT = Path(__file__).resolve().parents[2]
CLI_PROGRAMS = {"codex": "codex", "gemini": "gemini", "opencode": "opencode"}
_THEIR_VARS = ("OPENAI_", "GEMINI_", "GOOGLE_", "ANTHROPIC_", "CODEX_", "OPENCODE", "CLAUDE")
RUN_TIMEOUT = 240.0
OPENCODE_SEED = CHECKOUT / ".clis" / "opencode-config"


def cli_folder() -> Path:
    """Where the test command installed the pinned CLIs' executables."""
    named = os.environ.get("FKS_AGENT_CLIS")
    return Path(named) if named else CHECKOUT / ".clis" / "node_modules" / ".bin"


@pytest.fixture(scope="session")
def agent_clis() -> Path:
    """The folder of the real `codex`, `gemini` and `opencode`; fails (never skips) when one
    is missing: the test command installs them."""
    folder = cli_folder()
    missing = [name for name in CLI_PROGRAMS.values() if not (folder / name).exists()]
    if missing:
        pytest.fail(
            f"the agent CLIs {', '.join(missing)} are not in {folder}; ./scripts/test installs "
            "them (the versions of sandbox_runner/images/versions.py), or set FKS_AGENT_CLIS",
            pytrace=False,
        )
    return folder


def cli_env(clis: Path, home: Path, extra: dict[str, str]) -> dict[str, str]:
    """The environment of `fks` running a CLI: the machine's own settings and keys of every
    agent CLI left out, a HOME of the test's own, the CLIs on PATH, and `extra` (the fake's)."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(_THEIR_VARS)}
    home.mkdir(parents=True, exist_ok=True)
    _seed_opencode(home / ".config" / "opencode")
    node = shutil.which("node")
    path = os.pathsep.join(p for p in (str(clis), str(Path(node).parent) if node else "") if p)
    return {
        **kept,
        **GIT_IDENTITY,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "PATH": f"{path}{os.pathsep}{kept.get('PATH', '')}",
        "IS_SANDBOX": "1",
        **extra,
    }


def _seed_opencode(folder: Path) -> None:
    """OpenCode's config folder in the test's HOME as after a first start: its plugin package
    (which `scripts/test` installs under `.clis/opencode-config/`) listed and linked. Without
    it, every OpenCode the tests start installs the package from the npm registry (as the
    agent image's wrapper avoids in a sandbox: images/clis.py)."""
    if not (OPENCODE_SEED / "node_modules").is_dir() or (folder / "node_modules").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(OPENCODE_SEED / name, folder / name)
    (folder / "node_modules").symlink_to(OPENCODE_SEED / "node_modules")


def cli_project(path: Path, cli: str, **agent: Any) -> Path:
    """A repository whose config has the agent `worker` of kind `cli` (with `agent`'s keys)."""
    repo = init_repo(path, {"README.md": "hello\n"})
    write_config(repo, {"agents": {"worker": {"cli": cli, **agent}}})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fks config")
    return repo


def run_cli(repo: Path, dsl: str, env: dict[str, str], *args: str) -> Result:
    return fks(
        "run",
        dsl,
        "--prompt",
        "Add f.txt and commit it.",
        *args,
        cwd=repo,
        env=env,
        timeout=RUN_TIMEOUT,
    )


def last_iteration(repo: Path) -> dict[str, Any]:
    runs = sorted((repo / ".forge" / "runs").glob("*/run.json"))
    assert runs, f"no run record in {repo}"
    record = json.loads(runs[-1].read_text())
    iterations = record["steps"][-1]["iterations"]
    assert iterations, record
    last: dict[str, Any] = iterations[-1]
    return last


SHELL_COMMIT = "echo hi > f.txt && git add f.txt && git commit -qm 'agent: add f'"
RED = "\x1b[31m"
BIDI = "\u202e"
DONE_TEXT = f"Done {RED}red{BIDI}txt.\nFORKHESTRA_COMPLETE"
"""The model's last words: the marker on a line of its own, with an escape sequence and a bidi
override that the transcript must neutralise."""


def assert_transcript(repo: Path, env: dict[str, str], title: str, *, command: str) -> None:
    """`fks logs` renders the run's transcript: the tool call, the model's text neutralised;
    and the web view says whose session it is."""
    from sandbox_runner.web.logview import read_log

    run = sorted((repo / ".forge" / "runs").glob("*/run.json"))[-1].parent
    view = read_log((run / last_iteration(repo)["log"]).open("rb"), claude=True)
    assert view.transcript and view.session == title, (view.session, view.html)
    assert "→ Bash: " in view.html and RED not in view.html and BIDI not in view.html
    shown = fks("logs", cwd=repo, env=env)
    assert shown.code == 0, shown.output
    assert "→ Bash: " + command in shown.stdout, shown.stdout
    assert "FORKHESTRA_COMPLETE" in shown.stdout, shown.stdout
    assert RED not in shown.stdout and BIDI not in shown.stdout, shown.stdout
    assert "result: success" in shown.stdout, shown.stdout
