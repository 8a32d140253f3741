"""A landed branch made a pull request: pushed to its remote with the token given to git on
the host only (through a credential helper that reads it from git's environment: never on a
command line, never in `.git/config`), then opened through the REST API, or the open one of
the same head updated. What happened comes back as a `PullRecord`; nothing raises."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox_runner.git.runner import GitError, git
from sandbox_runner.pulls.body import Commit
from sandbox_runner.pulls.github import GitHub, GitHubError
from sandbox_runner.pulls.target import PrTarget
from sandbox_runner.records.masking import Masker
from sandbox_runner.records.record import PullRecord, now

_TOKEN_VAR = "FKS_GITHUB_TOKEN"
_HELPER = (
    '!f() { test "$1" = get || exit 0; echo username=x-access-token; '
    f'echo "password=${_TOKEN_VAR}"; }}; f'
)
_COMMIT_SEP = "\x1f"


def push(project: Path, target: PrTarget) -> None:
    """`git push REMOTE BRANCH` (no force): the token reaches git through its environment."""
    git(
        project,
        *("-c", "credential.helper=", "-c", f"credential.helper={_HELPER}"),
        "push",
        "--quiet",
        target.remote,
        f"refs/heads/{target.branch}:refs/heads/{target.branch}",
        env={_TOKEN_VAR: target.token, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"},
    )


def branch_commits(project: Path, base: str, branch: str, limit: int) -> tuple[list[Commit], bool]:
    """The commits of `branch` not on `base` (at most `limit`; True: there are more)."""
    out = git(
        project,
        "log",
        "--no-color",
        f"--format=%h{_COMMIT_SEP}%<(300,trunc)%s",
        "-n",
        str(limit + 1),
        f"{base}..{branch}",
        "--",
        check=False,
        limit=1 << 20,
    )
    commits = [
        Commit(sha, subject.rstrip())
        for sha, _, subject in (line.partition(_COMMIT_SEP) for line in out.splitlines())
    ]
    return commits[:limit], len(commits) > limit


def publish(
    target: PrTarget,
    *,
    project: Path,
    title: str,
    body: str,
    notice: Callable[[str], None],
) -> PullRecord:
    """Push `target.branch`, then open its pull request or update the open one."""
    masker = Masker([target.token])
    client = target.client(notice)
    try:
        push(project, target)
        pull = _open_or_update(client, target, title, body)
    except (GitHubError, GitError) as exc:
        return _pull(target, error=masker.mask_text(str(exc))[:1000])
    finally:
        client.close()
    if pull is None:
        note = f"no commits between {target.base} and {target.branch} on GitHub"
        return _pull(target, note=note)
    state = "draft" if pull.get("draft") else str(pull.get("state", "open"))
    number = pull.get("number")
    return _pull(
        target,
        number=number if isinstance(number, int) else None,
        url=str(pull.get("html_url") or ""),
        state=state,
    )


def _pull(target: PrTarget, **fields: Any) -> PullRecord:
    return PullRecord(
        repo=target.repo, head=target.branch, base=target.base, updated=now(), **fields
    )


def _open_or_update(
    client: GitHub, target: PrTarget, title: str, body: str
) -> dict[str, Any] | None:
    """The open pull request of `target.branch`, updated, or a new one (None: GitHub sees no
    commits to propose)."""
    existing = _find(client, target)
    if existing is not None:
        return _update(client, target, existing, title, body)
    fields = {
        "title": title,
        "head": target.branch,
        "base": target.base,
        "body": body,
        "draft": target.draft,
    }
    try:
        created = client.request("POST", f"/repos/{target.repo}/pulls", json=fields)
    except GitHubError as exc:
        if exc.status != 422:
            raise
        if "no commits between" in exc.errors.lower():
            return None
        existing = _find(client, target) if "already exists" in exc.errors.lower() else None
        if existing is None:
            raise
        return _update(client, target, existing, title, body)
    return created if isinstance(created, dict) else {}


def _find(client: GitHub, target: PrTarget) -> dict[str, Any] | None:
    """The open pull request whose head is `OWNER:BRANCH` (GitHub ignores a head without its
    owner and lists every one)."""
    params = {"head": f"{target.owner}:{target.branch}", "state": "open"}
    found = client.request("GET", f"/repos/{target.repo}/pulls", params=params)
    if not isinstance(found, list):
        return None
    mine = [p for p in found if isinstance(p, dict) and _head_ref(p) == target.branch]
    return mine[0] if mine else None


def _head_ref(pull: dict[str, Any]) -> str | None:
    head = pull.get("head")
    return head.get("ref") if isinstance(head, dict) else None


def _update(
    client: GitHub, target: PrTarget, pull: dict[str, Any], title: str, body: str
) -> dict[str, Any]:
    number = pull.get("number")
    updated = client.request(
        "PATCH", f"/repos/{target.repo}/pulls/{number}", json={"title": title, "body": body}
    )
    return updated if isinstance(updated, dict) else pull
