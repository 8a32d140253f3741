"""What the host keeps of a kept workspace between runs (`workspace/kept.py`), without Docker."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fks_testing.helpers import init_repo

from sandbox_runner.backends.docker.workspace.kept import (
    held,
    kept_for_run,
    kept_volume_name,
    read_state,
)
from sandbox_runner.git.repo import Repo, open_repo


def _used(repo: Repo, run_id: str, base_index: str | None, *, unfinished: bool = False) -> None:
    """Run `run_id` takes the kept workspace, its last checkout says `base_index`."""
    with ExitStack() as stack:
        kept = kept_for_run(stack, repo, run_id, "img", resumed=False)
        assert kept is not None
        workspace: Any = SimpleNamespace(base_index=base_index)
        kept.release(workspace, run_id, "img", unfinished)


def test_only_what_a_finished_run_reported_is_trusted(tmp_path: Path) -> None:
    repo = open_repo(init_repo(tmp_path / "repo", {"README.md": "hello\n"}))
    with ExitStack() as stack:
        kept = kept_for_run(stack, repo, "r1", "img", resumed=False)
        assert kept is not None and kept.base_index is None  # a new volume: a full checkout
        assert kept.name == kept_volume_name(repo.top)
        state = read_state(repo)
        assert state is not None and (state.run, state.image) == ("r1", "img")  # if killed
        with held(repo) as mine:
            assert not mine  # one run at a time
        with ExitStack() as other:
            assert kept_for_run(other, repo, "r2", "img", resumed=False) is None
        kept.release(SimpleNamespace(base_index="1:2.3:4"), "r1", "img", False)  # type: ignore[arg-type]
    with ExitStack() as stack:
        kept = kept_for_run(stack, repo, "r2", "img", resumed=False)
        assert kept is not None and kept.base_index == "1:2.3:4"


def test_an_unfinished_step_keeps_it_for_its_run(tmp_path: Path) -> None:
    repo = open_repo(init_repo(tmp_path / "repo", {"README.md": "hello\n"}))
    _used(repo, "r1", "1:2.3:4", unfinished=True)
    with ExitStack() as stack:
        assert kept_for_run(stack, repo, "r2", "img", resumed=False) is None
        assert kept_for_run(stack, repo, "r3", "img", resumed=True) is None  # its work is elsewhere
    with ExitStack() as stack:
        kept = kept_for_run(stack, repo, "r1", "img", resumed=True)
        assert kept is not None and kept.base_index is None
    (repo.common_dir / "fks" / "kept-workspace.json").write_text("{broken")
    with ExitStack() as stack:  # a state fks cannot read trusts nothing
        kept = kept_for_run(stack, repo, "r4", "img", resumed=False)
        assert kept is not None and kept.base_index is None
