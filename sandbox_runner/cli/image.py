"""`fks image build|push`: the agent image the sandbox runs."""

from pathlib import Path
from typing import Annotated

import typer

from sandbox_runner.cli.common import handled
from sandbox_runner.errors import UsageError

BaseImageOption = Annotated[
    str | None,
    typer.Option(
        "--base-image", metavar="IMAGE", help="Base image (default: debian:bookworm-slim)."
    ),
]
CaCertOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--ca-cert",
        metavar="FILE",
        help="Extra CA certificate to trust in the image (repeatable).",
    ),
]
TagOption = Annotated[
    str | None,
    typer.Option("--tag", metavar="IMAGE", help="Image tag (default: fks-agent:latest)."),
]
ClaudeVersionOption = Annotated[
    str | None,
    typer.Option(
        "--claude-version",
        metavar="VERSION",
        help="Claude Code release (X.Y.Z or latest) to put in the image (default: the one "
        "this fks pins).",
    ),
]
FromOption = Annotated[
    str | None,
    typer.Option(
        "--from",
        metavar="IMAGE",
        help="Put the agent layer on your own (Debian/Ubuntu based) image instead; the "
        "result is tagged fks-agent:from-<image>-<hash of its inputs>.",
    ),
]
DevcontainerOption = Annotated[
    bool,
    typer.Option(
        "--devcontainer",
        help="Build from the devcontainer.json in PATH (default: the current directory's "
        ".devcontainer/), with the agent layer on top.",
    ),
]
WithOption = Annotated[
    list[str] | None,
    typer.Option(
        "--with",
        metavar="CLIS",
        help="Agent CLIs to put in besides Claude Code, pinned by fks: codex, gemini, opencode "
        "(comma-separated or repeated; default: the project's sandbox.imageWith, else none)."
        " Built under --tag: name one such as fks-agent:clis to keep the plain image as it is.",
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        metavar="FILE",
        help="Config file whose sandbox.imageWith names the CLIs to put in by default (default: "
        "the project's forge/chains.json, as fks run finds it).",
    ),
]
PathArgument = Annotated[
    Path | None,
    typer.Argument(
        metavar="[PATH]",
        help="With --devcontainer: a devcontainer.json or the folder holding it.",
    ),
]


@handled
def build_cmd(
    base_image: BaseImageOption = None,
    ca_cert: CaCertOption = None,
    tag: TagOption = None,
    claude_version: ClaudeVersionOption = None,
    from_image: FromOption = None,
    devcontainer: DevcontainerOption = False,
    with_clis: WithOption = None,
    config: ConfigOption = None,
    path: PathArgument = None,
) -> int:
    from sandbox_runner.commands import image

    if path is not None and not devcontainer:
        raise UsageError(f"unexpected argument {str(path)!r}; did you mean --devcontainer PATH?")
    options = image.BuildOptions(
        base_image=base_image,
        ca_certs=tuple(ca_cert or ()),
        tag=tag,
        claude_version=claude_version,
        from_image=from_image,
        devcontainer=(path or Path.cwd()) if devcontainer else None,
        with_clis=with_clis,
        config=config,
    )
    return image.build(options)


@handled
def push_cmd(
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            metavar="ENGINE",
            help=(
                "tcp://HOST:PORT (DOCKER_TLS_VERIFY/DOCKER_CERT_PATH apply), ssh://USER@HOST, "
                "context:NAME, or swarm (every node whose label fks.docker-engine gives its "
                "engine's URL)."
            ),
        ),
    ],
    image: Annotated[
        list[str] | None,
        typer.Option(
            "--image",
            metavar="IMAGE",
            help="Image to push (repeatable; default: fks-agent:latest and fks-proxy:latest).",
        ),
    ] = None,
) -> int:
    from sandbox_runner.commands import image as image_command

    return image_command.push(engine=engine, images=list(image or []))


def register(app: typer.Typer) -> None:
    image_app = typer.Typer(
        help="Build the agent image the sandbox runs; push it to other engines.",
        no_args_is_help=True,
    )
    image_app.command(
        "build",
        help="Build and tag the agent image (falls back to a locally made base when the public one cannot be pulled).",
    )(build_cmd)
    image_app.command(
        "push",
        help=(
            "Make the agent image (and the egress proxy's) present on another Docker engine through "
            "its API, with no registry: sent as `docker save | docker load` unless that engine has "
            "an image with the same id already."
        ),
    )(push_cmd)
    app.add_typer(image_app, name="image")
