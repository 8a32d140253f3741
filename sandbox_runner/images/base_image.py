"""The base image the agent image is built FROM: the requested or default one, pulled when
missing, else a Debian base made locally with debootstrap (for machines without a registry).

`sudo scripts/make-base-image [--force]` (or `python -m sandbox_runner.images.base_image
make-base [--force]`, as root) makes the local base fks-base:bookworm; `fks image build` makes it
too when the default base cannot be pulled and no `--base-image` was given. It is debootstrap's
`minbase` bookworm with git and ca-certificates from deb.debian.org, with the apt sources
`debian:bookworm-slim` has (bookworm, -updates, -security: apt in the agent's Dockerfile needs
them) and without the downloaded packages, `docker import`ed with PATH, LANG=C.UTF-8 and
CMD ["bash"]: about 40 s and ~225 MB. It needs only the standard library, so any python3 runs it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from sandbox_runner.docker_daemon import one_line
from sandbox_runner.errors import SandboxError
from sandbox_runner.programs import find_program, host_env

DEFAULT_BASE_IMAGE = "debian:bookworm-slim"
LOCAL_BASE_IMAGE = "fks-base:bookworm"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# debootstrap writes only the release itself; debian:bookworm-slim also has these two.
_BASE_SOURCES_LIST = f"""\
deb {DEBIAN_MIRROR} {DEBIAN_SUITE} main
deb {DEBIAN_MIRROR} {DEBIAN_SUITE}-updates main
deb http://deb.debian.org/debian-security {DEBIAN_SUITE}-security main
"""
_BASE_IMPORT_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["bash"]',
)

Say = Callable[[str], None]


def say_line(line: str) -> None:
    print(line, flush=True)


# --- Which base ----------------------------------------------------------------------------


def resolve_base_image(
    requested: str | None,
    *,
    is_present: Callable[[str], bool],
    pull: Callable[[str], None],
    make_local_base: Callable[[], object],
    say: Say = say_line,
) -> str:
    """The base to build FROM: the requested/default one, pulled if missing; without an
    explicit request, fall back to the locally made LOCAL_BASE_IMAGE when the pull fails."""
    base = requested or DEFAULT_BASE_IMAGE
    if is_present(base):
        return base
    try:
        pull(base)
    except SandboxError as exc:
        if requested is not None:
            raise SandboxError(
                f"Base image {base!r} is not available locally and {exc}; pull or build it "
                f"yourself, or omit --base-image to fall back to {LOCAL_BASE_IMAGE}"
            ) from None
        say(f"fks: {exc}; using the locally made base {LOCAL_BASE_IMAGE} instead")
        if not is_present(LOCAL_BASE_IMAGE):
            make_local_base()
        return LOCAL_BASE_IMAGE
    return base


# --- The locally made base (debootstrap) ---------------------------------------------------


def make_base_image(
    *, tag: str = LOCAL_BASE_IMAGE, force: bool = False, say: Say = say_line
) -> bool:
    """debootstrap a minimal Debian and `docker import` it as `tag`; False if it already existed.

    Needs root, the `docker` CLI and debootstrap (installed with apt-get when missing).
    """
    docker_cli = find_program("docker")
    if docker_cli is None:
        raise SandboxError("Cannot make the base image: no 'docker' CLI on PATH; install Docker")
    if not force and _cli_image_exists(docker_cli, tag):
        say(f"{tag} already exists; not remaking it (use --force to)")
        return False
    if os.geteuid() != 0:
        raise SandboxError(
            f"Making the local base image {tag} needs root (debootstrap); run "
            "'sudo scripts/make-base-image' (or 'sudo python3 -m sandbox_runner.images.base_image make-base'), "
            "or pass --base-image with an image you have"
        )
    debootstrap = _ensure_debootstrap(say)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fks-base-") as tmp, _unmounted_on_exit(Path(tmp)):
        rootfs = Path(tmp) / "rootfs"
        say(f"debootstrap --variant=minbase {DEBIAN_SUITE} into {rootfs} (about a minute)")
        _run(
            [
                debootstrap,
                "--variant=minbase",
                "--include=git,ca-certificates",
                DEBIAN_SUITE,
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            what="debootstrap",
        )
        (rootfs / "etc/apt/sources.list").write_text(_BASE_SOURCES_LIST)
        for leftover in [
            *(rootfs / "var/cache/apt/archives").glob("*.deb"),
            *(rootfs / "var/lib/apt/lists").glob("*_*"),
        ]:
            leftover.unlink()
        say(f"docker import {rootfs} as {tag}")
        _import(rootfs, docker_cli, tag)
    say(f"made {tag} in {time.monotonic() - started:.0f} s")
    return True


def _import(rootfs: Path, docker_cli: str, tag: str) -> None:
    """`tar -c rootfs | docker import - tag`."""
    changes = [arg for change in _BASE_IMPORT_CHANGES for arg in ("--change", change)]
    with subprocess.Popen(
        [_program("tar"), "-C", str(rootfs), "--numeric-owner", "-c", "."],
        stdout=subprocess.PIPE,
        cwd="/",
        env=host_env(),
    ) as tar:
        imported = subprocess.run(
            [docker_cli, "import", *changes, "-", tag],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            check=False,
            cwd="/",
            env=host_env(),
        )
    if tar.returncode != 0 or imported.returncode != 0:
        raise SandboxError(
            f"docker import of {rootfs} failed (tar exit {tar.returncode}, docker exit "
            f"{imported.returncode}): {one_line(imported.stderr)}"
        )


def _program(name: str) -> str:
    found = find_program(name)
    if found is None:
        raise SandboxError(f"Cannot make the base image: no '{name}' on PATH; install it")
    return found


def _cli_image_exists(docker_cli: str, name: str) -> bool:
    result = subprocess.run(
        [docker_cli, "image", "inspect", name],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
        env=host_env(),
    )
    if result.returncode == 0:
        return True
    if "no such image" in result.stderr.lower():
        return False
    raise SandboxError(
        f"'docker image inspect {name}' failed: {one_line(result.stderr)}; "
        "is the Docker daemon running?"
    )


def _ensure_debootstrap(say: Say) -> str:
    found = find_program("debootstrap") or shutil.which("debootstrap", path="/usr/sbin:/sbin")
    if found:
        return found
    apt_get = find_program("apt-get")
    if apt_get is None:
        raise SandboxError(
            "Cannot make the local base image: debootstrap is not installed and there is no "
            "apt-get to install it; install debootstrap or pass --base-image"
        )
    say("installing debootstrap with apt-get")
    _run([apt_get, "update", "-q"], what="apt-get update")
    _run(
        [apt_get, "install", "-y", "-q", "--no-install-recommends", "debootstrap"],
        what="apt-get install debootstrap",
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    found = find_program("debootstrap") or shutil.which("debootstrap", path="/usr/sbin:/sbin")
    if not found:
        raise SandboxError("apt-get installed debootstrap but it is not on PATH or in /usr/sbin")
    return found


def _run(argv: Sequence[str], *, what: str, env: dict[str, str] | None = None) -> None:
    """Run with output passed through; SandboxError naming the command when it fails."""
    result = subprocess.run(argv, env=host_env(env), cwd="/", check=False)
    if result.returncode != 0:
        raise SandboxError(f"{what} failed (exit {result.returncode}): {' '.join(argv)}")


@contextlib.contextmanager
def _unmounted_on_exit(root: Path) -> Iterator[None]:
    """A failed debootstrap can leave proc/sys mounted in the target: unmount them before the
    temporary directory is deleted, so the deletion never reaches into the host's."""
    try:
        yield
    finally:
        prefix = str(root.resolve()) + "/"
        mounts = (
            Path("/proc/mounts").read_text().splitlines() if Path("/proc/mounts").exists() else []
        )
        targets = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
        umount = find_program("umount") or "/bin/umount"
        for target in sorted(targets, key=len, reverse=True):
            subprocess.run([umount, "-l", target], check=False, cwd="/", env=host_env())


# --- python -m sandbox_runner.images.base_image make-base ---------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "make-base" or not set(args[1:]) <= {"--force"}:
        print(
            "usage: python -m sandbox_runner.images.base_image make-base [--force]",
            file=sys.stderr,
        )
        return 2
    try:
        make_base_image(force="--force" in args)
    except SandboxError as exc:
        print(f"make-base-image: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
