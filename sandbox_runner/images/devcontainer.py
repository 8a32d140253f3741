"""A repository's `.devcontainer/devcontainer.json` as the sandbox's image: its `image`, or its
`build.dockerfile` (with `context` and `args`), under the agent layer (see derived), plus its
`containerEnv` and `remoteUser`. Fields fks does not support are named in one warning."""

from __future__ import annotations

import hashlib
import io
import json
import re
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from sandbox_runner.bounded import LimitExceeded, load_json
from sandbox_runner.docker_daemon import docker_client
from sandbox_runner.errors import ConfigError, SandboxError
from sandbox_runner.images.build import build_context
from sandbox_runner.images.derived import build_derived_image
from sandbox_runner.images.lookup import image_exists, split_tag
from sandbox_runner.images.versions import resolve_claude_version
from sandbox_runner.labels import LABEL_USER

if TYPE_CHECKING:
    from collections.abc import Sequence

DEVCONTAINER = "devcontainer"
"""The `sandbox.image` value that means "this repository's devcontainer.json"."""
DEVCONTAINER_BYTES = 1 << 20
"""Bytes of a devcontainer.json read at most (a repository can ship any file as one)."""
CANDIDATES = (".devcontainer/devcontainer.json", ".devcontainer.json")
SUPPORTED = frozenset({"name", "image", "build", "dockerFile", "context"})
SUPPORTED |= {"containerEnv", "remoteUser", "$schema"}
SUPPORTED_BUILD = frozenset({"dockerfile", "context", "args"})
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?")


@dataclass(frozen=True)
class DevContainer:
    """What fks takes from one devcontainer.json."""

    file: Path
    image: str | None = None
    dockerfile: Path | None = None
    context: Path | None = None
    args: dict[str, str] = field(default_factory=dict)
    container_env: dict[str, str] = field(default_factory=dict)
    remote_user: str | None = None
    unsupported: tuple[str, ...] = ()


def find(path: Path) -> Path:
    """`path` itself when it is a file, else the devcontainer.json it holds."""
    if path.is_file():
        return path
    for candidate in CANDIDATES:
        if (path / candidate).is_file():
            return path / candidate
    raise ConfigError(
        f"no devcontainer.json in {path} (looked for {' and '.join(CANDIDATES)}); "
        "pass its path to --devcontainer"
    )


def strip_jsonc(text: str) -> str:
    """JSON from JSON with comments (// and /* */) and trailing commas, as VS Code writes it."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            end = i + 1
            while end < n and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[i : end + 1])
            i = end + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            i = n if close < 0 else close + 2
        else:
            out.append(c)
            i += 1
    return re.sub(r",(\s*[}\]])", r"\1", "".join(out))


def load(file: Path, *, root: Path | None = None) -> DevContainer:
    """Parse and check `file`; ConfigError naming the file and the field on a bad value.

    `root` is the repository the file belongs to (default: the git work tree it is in): the
    file and its build context must be inside it, whatever links lead there, because Docker
    sends the whole context to the build, which can copy any of it into the agent's image."""
    root = _repository_of(file) if root is None else root
    _check_inside(file, file, root, "the file")
    try:
        with file.open("rb") as handle:
            text = handle.read(DEVCONTAINER_BYTES + 1).decode("utf-8")
        data = load_json(strip_jsonc(text), max_bytes=DEVCONTAINER_BYTES)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read it ({exc})") from None
    except LimitExceeded as exc:
        raise ConfigError(f"{file}: {exc}, too much to be a devcontainer.json") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{file}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: must be a JSON object")
    build = _object(file, data, "build")
    unsupported = [key for key in data if key not in SUPPORTED]
    unsupported += [f"build.{key}" for key in build if key not in SUPPORTED_BUILD]
    image = _string(file, data, "image")
    dockerfile = _string(file, build, "dockerfile", "build.dockerfile") or _string(
        file, data, "dockerFile"
    )
    context = _string(file, build, "context", "build.context") or _string(file, data, "context")
    if (image is None) == (dockerfile is None):
        raise ConfigError(
            f"{file}: needs exactly one of 'image' and 'build.dockerfile' (Docker Compose "
            "setups are not supported)"
        )
    remote_user = _string(file, data, "remoteUser")
    if remote_user is not None and not _USER.fullmatch(remote_user):
        raise ConfigError(f"{file}: remoteUser: {remote_user!r} is not a user name")
    here = file.parent
    if dockerfile:
        _check_inside(file, here / (context or "."), root, "build.context")
    return DevContainer(
        file=file,
        image=image,
        dockerfile=(here / dockerfile) if dockerfile else None,
        context=(here / (context or ".")) if dockerfile else None,
        args=_strings(file, build, "args", "build.args"),
        container_env=_env(file, data),
        remote_user=remote_user,
        unsupported=tuple(unsupported),
    )


def _repository_of(file: Path) -> Path:
    """The git work tree `file` is in; outside git, the folder holding `.devcontainer`."""
    from sandbox_runner.git.runner import git_toplevel

    folder = file.parent
    return git_toplevel(folder) or (folder.parent if folder.name == ".devcontainer" else folder)


def _check_inside(file: Path, path: Path, root: Path, name: str) -> None:
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):
        raise ConfigError(
            f"{file}: {name} {path} is outside the repository {root} (through '..' or a link); "
            "Docker would send the host's files there to the build: keep it in the repository"
        ) from None


def _object(file: Path, data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{file}: {key}: must be an object")
    return value


def _string(file: Path, data: Mapping[str, Any], key: str, name: str = "") -> str | None:
    value = data.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError(f"{file}: {name or key}: must be a non-empty string")
    return value


def _strings(file: Path, data: Mapping[str, Any], key: str, name: str) -> dict[str, str]:
    value = _object(file, data, key)
    bad = [k for k, v in value.items() if not isinstance(v, str)]
    if bad:
        raise ConfigError(f"{file}: {name}.{bad[0]}: must be a string")
    return dict(value)


def _env(file: Path, data: Mapping[str, Any]) -> dict[str, str]:
    env = _strings(file, data, "containerEnv", "containerEnv")
    bad = [name for name in env if not _ENV_NAME.fullmatch(name)]
    if bad:
        raise ConfigError(f"{file}: containerEnv.{bad[0]}: not a variable name")
    if any("${" in value for value in env.values()):
        raise ConfigError(
            f"{file}: containerEnv: ${{…}} variables (e.g. ${{localEnv:X}}) are not supported; "
            "write the values out"
        )
    return env


def unsupported_warning(dev: DevContainer) -> str | None:
    if not dev.unsupported:
        return None
    return (
        f"{dev.file}: fks does not support {', '.join(dev.unsupported)}; "
        "they are ignored (fks uses image or build, containerEnv and remoteUser)"
    )


# --- building ----------------------------------------------------------------------------------


def _slug(file: Path) -> str:
    name = re.sub(r"[^a-z0-9_.-]+", "-", file.resolve().parent.parent.name.lower()).strip("-.")
    digest = hashlib.sha256(str(file.resolve()).encode()).hexdigest()[:8]
    return f"{name[:30] or 'repo'}-{digest}"


def _base_image(dev: DevContainer, out: TextIO) -> str:
    """The devcontainer's own image: `image`, or its Dockerfile built (Docker's cache decides
    what is rebuilt) as fks-devcontainer:<repository>-<hash of the file's path>."""
    if dev.image is not None:
        return dev.image
    assert dev.dockerfile is not None and dev.context is not None
    try:
        dockerfile = dev.dockerfile.resolve().relative_to(dev.context.resolve())
    except ValueError:
        raise ConfigError(
            f"{dev.file}: build.dockerfile {dev.dockerfile} is outside build.context "
            f"{dev.context}; Docker needs it inside"
        ) from None
    if not dev.dockerfile.is_file():
        raise ConfigError(f"{dev.file}: build.dockerfile: {dev.dockerfile} does not exist")
    tag = f"fks-devcontainer:{_slug(dev.file)}"
    build_context(
        docker_client(),
        dev.context,
        base_image=tag,
        tag=tag,
        out=out,
        buildargs=dev.args,
        dockerfile=dockerfile.as_posix(),
    )
    return tag


def _finishing_dockerfile(layered: str, dev: DevContainer) -> str:
    lines = [f"FROM {layered}"]
    if dev.container_env:
        pairs = " ".join(f"{name}={json.dumps(value)}" for name, value in dev.container_env.items())
        lines.append(f"ENV {pairs}")
    if dev.remote_user:
        user = dev.remote_user.split(":")[0]
        lines.append(
            f"RUN id -u {user} >/dev/null 2>&1 || "
            f"{{ echo \"fks: remoteUser '{user}' does not exist in the image\" >&2; exit 3; }}"
        )
        lines.append(f"USER {dev.remote_user}")
    return "\n".join(lines) + "\n"


def build_devcontainer_image(
    path: Path,
    *,
    ca_certs: Sequence[Path],
    claude_version: str,
    tag: str | None = None,
    out: TextIO | None = None,
    warn: TextIO | None = None,
    root: Path | None = None,
) -> str:
    """The agent image for the devcontainer.json at (or in) `path` of the repository `root`
    (default: the one it is in); reused when nothing changed. Returns its tag."""
    stream = out if out is not None else sys.stdout
    dev = load(find(path), root=root)
    if (warning := unsupported_warning(dev)) is not None:
        print(f"fks: warning: {warning}", file=warn or sys.stderr, flush=True)
    base = _base_image(dev, stream)
    layered = build_derived_image(
        base, ca_certs=ca_certs, claude_version=claude_version, out=stream, say_use=False
    )
    return _finish(layered, dev, tag=tag, out=stream)


def _finish(layered: str, dev: DevContainer, *, tag: str | None, out: TextIO) -> str:
    """containerEnv and remoteUser on top of the layered image, tagged by their hash."""
    client = docker_client()
    dockerfile = _finishing_dockerfile(layered, dev)
    digest = hashlib.sha256(f"{client.images.get(layered).id}\n{dockerfile}".encode())
    final = f"fks-agent:devcontainer-{_slug(dev.file)}-{digest.hexdigest()[:12]}"
    if image_exists(client, final):
        print(f"{final} is up to date (its inputs have not changed)", file=out)
    else:
        with tempfile.TemporaryDirectory(prefix="fks-devcontainer-") as tmp:
            (Path(tmp) / "Dockerfile").write_text(dockerfile, encoding="utf-8")
            labels = {LABEL_USER: dev.remote_user} if dev.remote_user else {}
            build_context(
                client,
                Path(tmp),
                base_image=layered,
                tag=final,
                out=out,
                labels=labels,
                dockerfile="Dockerfile",
            )
    if tag:
        client.images.get(final).tag(*split_tag(tag))
    result = tag or final
    print(f"Use it with: fks run --sandbox --image {result}", file=out, flush=True)
    return result


def ensure_for_run(repo_top: Path, *, say: TextIO) -> str:
    """`sandbox.image: "devcontainer"`: the repository's image, built first when missing."""
    print(f"fks: preparing the devcontainer image of {repo_top} …", file=say, flush=True)
    log = io.StringIO()
    # The host's own extra CAs (Debian's place for them): a run has no --ca-cert option.
    certs = sorted(HOST_CA_DIR.glob("*.crt"))
    try:
        built = build_devcontainer_image(
            repo_top,
            ca_certs=certs,
            claude_version=resolve_claude_version(None),
            out=log,
            warn=say,
            root=repo_top,
        )
    except SandboxError as exc:
        raise SandboxError(f"{exc} (building the devcontainer image for sandbox.image)") from None
    print(f"fks: devcontainer image {built}", file=say, flush=True)
    return built
