"""A repository's devcontainer.json as the sandbox image: parsing, the image and Dockerfile
variants, containerEnv, remoteUser, the one warning for unsupported fields, and reuse."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fks_testing.helpers import fks, git, init_repo, write_config

from sandbox_runner import docker_daemon
from sandbox_runner import labels as fks_labels
from sandbox_runner.errors import ConfigError
from sandbox_runner.images import derived, devcontainer, lookup

CA_DIR = Path("/usr/local/share/ca-certificates")


def ca_args() -> list[str]:
    return [arg for cert in sorted(CA_DIR.glob("*.crt")) for arg in ("--ca-cert", str(cert))]


def local_base() -> str:
    labels = docker_daemon.docker_client().images.get(lookup.DEFAULT_AGENT_IMAGE).labels
    return labels["org.opencontainers.image.base.name"]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --- parsing -----------------------------------------------------------------------------------


def test_jsonc_comments_and_trailing_commas() -> None:
    text = """// top
    {
      "a": "http://x//y", /* block
      comment */ "b": "q\\"//", "c": [1, 2,],
    }"""
    assert json.loads(devcontainer.strip_jsonc(text)) == {
        "a": "http://x//y",
        "b": 'q"//',
        "c": [1, 2],
    }


def test_the_dockerfile_variant_resolves_paths_next_to_the_file(tmp_path: Path) -> None:
    file = write(
        tmp_path / ".devcontainer" / "devcontainer.json",
        '{"build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "1"},'
        ' "target": "dev"}, "containerEnv": {"A": "b"}, "remoteUser": "vscode",'
        ' "features": {}, "customizations": {}}',
    )
    assert devcontainer.find(tmp_path) == file
    dev = devcontainer.load(file)
    assert dev.image is None
    assert dev.dockerfile == tmp_path / ".devcontainer" / "Dockerfile"
    assert dev.context == tmp_path / ".devcontainer" / ".."
    assert dev.args == {"V": "1"}
    assert dev.container_env == {"A": "b"}
    assert dev.remote_user == "vscode"
    assert dev.unsupported == ("features", "customizations", "build.target")
    assert devcontainer.unsupported_warning(dev) == (
        f"{file}: fks does not support features, customizations, build.target; they are "
        "ignored (fks uses image or build, containerEnv and remoteUser)"
    )


def test_the_image_variant_and_the_root_file(tmp_path: Path) -> None:
    write(tmp_path / ".devcontainer.json", '{"name": "x", "image": "gcc:13"}')
    dev = devcontainer.load(devcontainer.find(tmp_path))
    assert (dev.image, dev.dockerfile, dev.unsupported) == ("gcc:13", None, ())
    assert devcontainer.unsupported_warning(dev) is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{}", "needs exactly one of 'image' and 'build.dockerfile'"),
        ('{"image": "a", "build": {"dockerfile": "D"}}', "needs exactly one of"),
        ('{"image": 3}', "image: must be a non-empty string"),
        ('{"image": "a", "containerEnv": {"1X": "y"}}', "containerEnv.1X: not a variable name"),
        ('{"image": "a", "containerEnv": {"X": 1}}', "containerEnv.X: must be a string"),
        (
            '{"image": "a", "containerEnv": {"X": "${localEnv:HOME}"}}',
            "variables (e.g. ${localEnv:X}) are not supported",
        ),
        ('{"image": "a", "remoteUser": "a b"}', "remoteUser: 'a b' is not a user name"),
        ('{"image": "a",', "not valid JSON"),
        ("[]", "must be a JSON object"),
    ],
)
def test_bad_files_name_the_file_and_the_field(tmp_path: Path, content: str, message: str) -> None:
    file = write(tmp_path / ".devcontainer" / "devcontainer.json", content)
    with pytest.raises(ConfigError) as caught:
        devcontainer.load(file)
    assert str(caught.value).startswith(f"{file}: ")
    assert message in str(caught.value)


def test_the_finishing_layer_sets_the_env_and_the_user(tmp_path: Path) -> None:
    dev = devcontainer.DevContainer(
        file=tmp_path / "d.json", image="x", container_env={"A": 'say "hi"'}, remote_user="dev"
    )
    assert devcontainer._finishing_dockerfile("fks-agent:from-x-1", dev).splitlines() == [
        "FROM fks-agent:from-x-1",
        'ENV A="say \\"hi\\""',
        "RUN id -u dev >/dev/null 2>&1 || "
        "{ echo \"fks: remoteUser 'dev' does not exist in the image\" >&2; exit 3; }",
        "USER dev",
    ]


def test_command_line_errors_are_one_line(tmp_path: Path) -> None:
    res = fks("image", "build", str(tmp_path))
    assert (res.code, res.stderr.splitlines()) == (
        2,
        [f"fks: unexpected argument {str(tmp_path)!r}; did you mean --devcontainer PATH?"],
    )
    res = fks("image", "build", "--devcontainer", str(tmp_path))
    assert (res.code, res.stderr.splitlines()) == (
        2,
        [
            f"fks: no devcontainer.json in {tmp_path} (looked for .devcontainer/devcontainer.json"
            " and .devcontainer.json); pass its path to --devcontainer"
        ],
    )
    res = fks("image", "build", "--devcontainer", "--from", "x:1")
    assert (res.code, res.stderr.splitlines()) == (
        2,
        ["fks: --devcontainer cannot be used with --from or --base-image"],
    )


# --- real builds and runs (Docker) --------------------------------------------------------------


def _remove_made_images(tag: str) -> None:
    """The finished image, the layered one under it and the devcontainer's own build."""
    client = docker_daemon.docker_client()
    labels = client.images.get(tag).labels
    layered = derived.derived_tag(labels[fks_labels.LABEL_FROM], labels[fks_labels.LABEL_INPUTS])
    made = [tag, layered]
    if labels[fks_labels.LABEL_FROM].startswith("fks-devcontainer:"):
        made.append(labels[fks_labels.LABEL_FROM])
    subprocess.run(["docker", "rmi", "-f", *made], capture_output=True, check=False)


AGENT = (
    "#!/bin/sh\nset -e\n"
    'echo "$(id -un) $GREETING" > who.txt\n'
    "git add who.txt && git commit -qm 'who am I'\n"
    "echo FORKHESTRA_COMPLETE\n"
)


def _project(tmp_path: Path, devcontainer_json: dict[str, object], **files: str) -> Path:
    repo = init_repo(tmp_path / "repo", {"agent.sh": AGENT, **files})
    write(repo / ".devcontainer" / "devcontainer.json", json.dumps(devcontainer_json))
    (repo / "agent.sh").chmod(0o755)
    write_config(repo, {"sandbox": {"image": "devcontainer"}})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "devcontainer")
    return repo


def _run_and_read(repo: Path) -> tuple[str, str]:
    res = fks("run", "./agent.sh:2", "--sandbox", cwd=repo, timeout=900)
    assert res.code == 0, res.output[-3000:]
    (built,) = [
        line.removeprefix("fks: devcontainer image ")
        for line in res.stderr.splitlines()
        if line.startswith("fks: devcontainer image ")
    ]
    return built, (repo / "who.txt").read_text()


@pytest.mark.docker
def test_dockerfile_variant_env_user_warning_and_reuse(tmp_path: Path) -> None:
    dockerfile = "ARG BASE\nFROM ${BASE}\nRUN useradd --uid 1234 --create-home dev\n"
    repo = _project(
        tmp_path,
        {
            "build": {"dockerfile": "Dockerfile", "context": "..", "args": {"BASE": local_base()}},
            "containerEnv": {"GREETING": "hello from the devcontainer"},
            "remoteUser": "dev",
            "postCreateCommand": "make",
        },
        **{".devcontainer/Dockerfile": dockerfile},
    )
    built, who = _run_and_read(repo)
    try:
        assert who == "dev hello from the devcontainer\n"
        again = fks("image", "build", "--devcontainer", str(repo), *ca_args(), timeout=300)
        assert again.code == 0, again.output[-2000:]
        assert again.stdout.count("is up to date (its inputs have not changed)") == 2
        assert f"Use it with: fks run --sandbox --image {built}" in again.stdout
        warnings = [line for line in again.stderr.splitlines() if "does not support" in line]
        assert warnings == [
            f"fks: warning: {repo / '.devcontainer' / 'devcontainer.json'}: fks does not "
            "support postCreateCommand; they are ignored (fks uses image or build, containerEnv "
            "and remoteUser)"
        ]
    finally:
        _remove_made_images(built)


@pytest.mark.docker
def test_image_variant_runs_as_remote_user_with_container_env(tmp_path: Path) -> None:
    repo = _project(
        tmp_path,
        {"image": local_base(), "containerEnv": {"GREETING": "hi"}, "remoteUser": "nobody"},
    )
    built, who = _run_and_read(repo)
    try:
        assert who == "nobody hi\n"
        assert docker_daemon.docker_client().images.get(built).labels["fks.user"] == "nobody"
    finally:
        _remove_made_images(built)
