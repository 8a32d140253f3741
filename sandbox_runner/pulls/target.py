"""Where a run's pull request goes, found and checked before any agent runs: the remote and
the GitHub repository behind it, the API, the token (never shown, never in a container), the
branch the run lands on and the base it asks to merge into."""

from __future__ import annotations

import os
import re
import subprocess
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sandbox_runner.errors import ConfigError
from sandbox_runner.git.runner import git
from sandbox_runner.paths import slug
from sandbox_runner.plan.pr import PrSettings
from sandbox_runner.programs import find_program, host_env
from sandbox_runner.pulls.github import DEFAULT_API, GitHub, GitHubError

TOKEN_VARS = ("GITHUB_TOKEN", "GH_TOKEN")
PR_BRANCH_PREFIX = "fks/pr"
_SCP = re.compile(r"(?:[^@/]+@)?([^:/]+):(?!//)/?([^/]+/[^/]+?)(?:\.git)?/?")
_PATH = re.compile(r"/([^/]+/[^/]+?)(?:\.git)?/?")


@dataclass(frozen=True)
class PrTarget:
    """A run's pull request as it will be made: `branch` pushed to `remote`, then asked to
    merge into `base` of `repo` (`owner/name`) through `api`."""

    repo: str
    api: str
    remote: str
    branch: str
    base: str
    draft: bool
    token: str = field(repr=False)

    @property
    def owner(self) -> str:
        return self.repo.split("/", 1)[0]

    def client(self, notice: Callable[[str], None] = lambda _text: None) -> GitHub:
        return GitHub(self.api, self.token, notice=notice)


def pr_branch(label: str) -> str:
    """The branch a run with `--pr` lands on by default: one per chain (or DSL)."""
    return f"{PR_BRANCH_PREFIX}/{slug(label)}"


def resolve_target(
    settings: PrSettings,
    *,
    project: Path,
    run_base: str,
    label: str,
    env: Mapping[str, str] | None = None,
) -> PrTarget:
    """The target `settings` name, with every default filled in; a remote that is missing or
    not GitHub, or no token, is one `ConfigError`."""
    env = os.environ if env is None else env
    remote = settings.remote or "origin"
    url = remote_url(project, remote)
    if url is None:
        raise ConfigError(
            f"pr: no git remote {remote!r} in {project}; add it (git remote add {remote} URL) "
            "or set pr.remote"
        )
    api = (settings.api or env.get("GITHUB_API_URL") or "").rstrip("/")
    host, repo = github_repo(url, _github_hosts(api, env))
    if settings.repo is None and repo is None:
        raise ConfigError(
            f"pr: remote {remote!r} ({_shown(url)}) is not a GitHub repository; for GitHub "
            "Enterprise set pr.api (https://HOST/api/v3), or set pr.repo"
        )
    repo = settings.repo or repo
    assert repo is not None
    api = api or (DEFAULT_API if host in (None, "github.com") else f"https://{host}/api/v3")
    token = find_token(env, host)
    if token is None:
        raise ConfigError(
            "pr: no GitHub token: set GITHUB_TOKEN or GH_TOKEN, or log in with gh auth login"
        )
    branch = settings.branch or pr_branch(label)
    base = settings.base or run_base
    if branch == base:
        raise ConfigError(f"pr: the run lands on {branch!r}, the pull request's base; set pr.base")
    draft = True if settings.draft is None else settings.draft
    return PrTarget(repo, api, remote, branch, base, draft, token)


def check_target(target: PrTarget) -> None:
    """GitHub knows the repository, the token may push to it and the base branch is there."""
    client = target.client()
    try:
        repo = client.request("GET", f"/repos/{target.repo}")
        permissions = repo.get("permissions") if isinstance(repo, dict) else None
        if not isinstance(permissions, dict) or permissions.get("push") is not True:
            raise ConfigError(f"pr: the GitHub token may not push to {target.repo}")
        try:
            client.request("GET", f"/repos/{target.repo}/branches/{_quoted(target.base)}")
        except GitHubError as exc:
            if exc.status != 404:
                raise
            raise ConfigError(
                f"pr: the base branch {target.base!r} is not on GitHub in {target.repo}; "
                "push it first or set pr.base"
            ) from None
    except GitHubError as exc:
        raise ConfigError(f"pr: {exc}") from None
    finally:
        client.close()


def remote_url(project: Path, remote: str) -> str | None:
    """The remote's URL as configured (not rewritten by `url.*.insteadOf`)."""
    out = git(project, "config", "--get", f"remote.{remote}.url", check=False)
    return out.strip() or None


def github_repo(url: str, hosts: frozenset[str]) -> tuple[str | None, str | None]:
    """The host and `owner/name` of a GitHub remote URL (https, ssh or scp-like forms);
    (host, None) when the host is not one of `hosts`."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("https", "http", "ssh", "git"):
        host, found = parts.hostname, _PATH.fullmatch(parts.path)
    elif (scp := _SCP.fullmatch(url)) is not None and "://" not in url:
        host, found = scp.group(1).lower(), _PATH.fullmatch("/" + scp.group(2))
    else:
        return None, None
    if host is None or host.lower() not in hosts or found is None:
        return host, None
    return host.lower(), found.group(1)


def _github_hosts(api: str, env: Mapping[str, str]) -> frozenset[str]:
    hosts = {"github.com", "www.github.com"}
    for url in (api, env.get("GITHUB_SERVER_URL", "")):
        host = urllib.parse.urlsplit(url).hostname
        if host and host != "api.github.com":
            hosts.add(host.lower())
    return frozenset(hosts)


def find_token(env: Mapping[str, str], host: str | None) -> str | None:
    """GITHUB_TOKEN, GH_TOKEN, else what `gh auth token` prints (None: none of them)."""
    for name in TOKEN_VARS:
        if env.get(name, "").strip():
            return env[name].strip()
    gh = find_program("gh")
    if gh is None:
        return None
    argv = [gh, "auth", "token", *(["--hostname", host] if host else [])]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=15, check=False, env=host_env()
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    token = done.stdout.strip()
    return token if done.returncode == 0 and token and "\n" not in token else None


def _shown(url: str) -> str:
    """A URL without the credentials it may hold."""
    parts = urllib.parse.urlsplit(url)
    if parts.password or parts.username:
        return parts._replace(netloc=parts.hostname or "").geturl()
    return url


def _quoted(branch: str) -> str:
    return urllib.parse.quote(branch, safe="")
