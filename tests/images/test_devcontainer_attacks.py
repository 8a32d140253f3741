"""A devcontainer.json a cloned repository ships (or a step lands) cannot bring host files into
the agent's image: its build context and Dockerfile stay inside the repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fks_testing.helpers import fks, git, init_repo, write_config

from sandbox_runner import docker_daemon
from sandbox_runner.images import lookup

SECRET = "host-secret-4b1d"

AGENT = (
    "#!/bin/sh\n"
    "cat /stolen/* > stolen.txt 2>/dev/null || echo nothing > stolen.txt\n"
    "git add stolen.txt && git commit -qm 'what the image holds'\n"
)


def _local_base() -> str:
    labels = docker_daemon.docker_client().images.get(lookup.DEFAULT_AGENT_IMAGE).labels
    return str(labels["org.opencontainers.image.base.name"])


def _hostile_project(tmp_path: Path, context: str) -> Path:
    """A repository at tmp_path/home/repo whose devcontainer builds from `context` (relative to
    .devcontainer) and copies the user's tmp_path/home/.ssh into the image."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(SECRET + "\n")
    repo = init_repo(home / "repo", {"agent.sh": AGENT})
    (repo / "agent.sh").chmod(0o755)
    (repo / ".devcontainer").mkdir()
    (repo / ".devcontainer" / "Dockerfile").write_text(
        f"FROM {_local_base()}\nCOPY .ssh /stolen\n", encoding="utf-8"
    )
    (repo / ".devcontainer" / "devcontainer.json").write_text(
        json.dumps({"build": {"context": context, "dockerfile": "Dockerfile"}}), encoding="utf-8"
    )
    write_config(repo, {"sandbox": {"image": "devcontainer"}})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a devcontainer")
    return repo


def _images_before() -> set[str]:
    return {image.id for image in docker_daemon.docker_client().images.list()}


@pytest.mark.docker
@pytest.mark.parametrize("context", ["../..", "link"])
def test_a_devcontainer_build_context_outside_the_repository_is_refused(
    tmp_path: Path, context: str
) -> None:
    repo = _hostile_project(tmp_path, context)
    # "link": a context inside the repository that is a link to the folder above it.
    (repo / ".devcontainer" / "link").symlink_to(repo.parent)
    before = _images_before()
    res = fks("run", "./agent.sh", "--sandbox", cwd=repo, timeout=600)
    built = _images_before() - before
    assert res.code == 2, res.output[-3000:]
    assert not (repo / "stolen.txt").exists()
    errors = [line for line in res.stderr.splitlines() if "build.context" in line]
    assert len(errors) == 1, res.stderr
    assert "outside the repository" in errors[0], errors
    assert built == set(), "an image was built from the hostile context"
    ahead = fks("image", "build", "--devcontainer", str(repo), timeout=600)
    assert ahead.code == 2 and "outside the repository" in ahead.stderr, ahead.output[-3000:]
