"""The other agent CLIs an agent image can carry besides Claude Code (`fks image build --with
codex,gemini,opencode`, or `sandbox.imageWith`): their names, the Dockerfile stages that install
each from the npm registry (pinned: `versions.AGENT_CLI_PACKAGES`), and the label that records
which ones an image holds.

Each CLI is installed by npm in a stage of its own (from one stage holding Node and npm), so
its layers are cached apart from the others'; the image's last stage copies in only the chosen
ones, after Claude Code and before fks (whose source changes most often).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping

from sandbox_runner.errors import UsageError
from sandbox_runner.images.versions import (
    AGENT_CLI_PACKAGES,
    NODE_VERSION,
    NPM_VERSION,
    OPENCODE_PLUGIN_PACKAGE,
)
from sandbox_runner.labels import LABEL_AGENT_CLIS, LABEL_TITLE
from sandbox_runner.plan.checks import did_you_mean

AGENT_CLIS = tuple(AGENT_CLI_PACKAGES)
"""The CLIs `--with` takes, in the order an image holds them."""
STAGES_MARK = "# fks: agent CLI stages"
"""The line of the agent Dockerfile the chosen CLIs' stages replace."""
COPIES_MARK = "# fks: agent CLIs"
"""The line of the agent Dockerfile the copies of the chosen CLIs replace."""
_LAUNCHED_BY_NODE = frozenset({"codex", "gemini"})
"""Gemini CLI is a Node program; Codex's native binary is started by a Node launcher."""
_CHECK_TIMEOUT_S = 600
"""A bound on a CLI's `--version` in the build, against a hang (Gemini CLI's takes 20 s and more
on a busy machine)."""
_LEFT_OUT = {"opencode": "lib/node_modules/opencode-ai/node_modules"}
"""What a CLI's install holds twice: OpenCode's install links its platform package's binary
into its own bin/ (the package is then not needed)."""
_OPENCODE_SEED = "/opt/fks-clis/opencode/config"
"""OpenCode's config folder as after its first start: at every start OpenCode installs its
plugin package (`@opencode-ai/plugin`, of its own version) in its config folder with npm unless
the folder's package-lock.json lists it. A container's HOME starts empty, so that was a request
to the npm registry per iteration (refused by the egress proxy, and reported as a host to
allow) and seconds of CPU. The image holds the package installed here, and its `opencode` is a
wrapper that gives a new HOME this folder's package files (node_modules linked, read-only)."""


def parse_clis(values: Iterable[str], *, where: str = "--with") -> tuple[str, ...]:
    """The CLIs `values` name (each may be a comma-separated list), in image order; a name
    that is none of them is a usage error naming it (`claude` is always in: not needed)."""
    names: set[str] = set()
    for value in values:
        for name in (part.strip().lower() for part in value.split(",")):
            if not name or name == "claude":
                continue
            if name not in AGENT_CLIS:
                hint = did_you_mean(name, AGENT_CLIS)
                raise UsageError(
                    f"{where}: {name!r} is not an agent CLI fks installs{hint} "
                    f"(it installs {', '.join(AGENT_CLIS)}; Claude Code is always in)"
                )
            names.add(name)
    return tuple(name for name in AGENT_CLIS if name in names)


def clis_label(names: Iterable[str]) -> dict[str, str]:
    """The label recording the CLIs an image holds."""
    return {LABEL_AGENT_CLIS: ",".join(names)}


def clis_in(labels: Mapping[str, str] | None) -> frozenset[str] | None:
    """The CLIs an image's labels say it holds; None: not an fks agent image (or one built
    before images recorded them), whose PATH alone can tell."""
    labels = labels or {}
    if LABEL_AGENT_CLIS in labels:
        return frozenset(n for n in labels[LABEL_AGENT_CLIS].split(",") if n)
    if labels.get(LABEL_TITLE) == "fks-agent":
        return frozenset()
    return None


def with_clis(dockerfile: str, names: Iterable[str]) -> str:
    """The agent Dockerfile with the stages and copies of the CLIs `names` (as it is without)."""
    chosen = list(names)
    if not chosen:
        return dockerfile
    stages = _node_stage() + "".join(_cli_stage(name) for name in chosen)
    copies = "COPY --from=node /node/ /\n" if _LAUNCHED_BY_NODE & set(chosen) else ""
    copies += "".join(f"COPY --from=cli-{name} /out/ /\n" for name in chosen)
    return dockerfile.replace(STAGES_MARK + "\n", stages).replace(COPIES_MARK + "\n", copies)


def _node_stage() -> str:
    return f"""# Node and npm, from the registry: npm installs each CLI in a stage of its own.
FROM system AS node
ARG NPM_REGISTRY=https://registry.npmjs.org
RUN set -eux; \\
    python3 /opt/fks-build/build_helper.py node {NODE_VERSION} /node; \\
    python3 /opt/fks-build/build_helper.py npm {NPM_VERSION} /opt/npm; \\
    /node/usr/local/bin/node --version

"""


def _cli_stage(name: str) -> str:
    from sandbox_runner.agentclis.registry import agent_cli

    program, package = agent_cli(name).program, AGENT_CLI_PACKAGES[name]
    prefix = f"/out/opt/fks-clis/{name}"
    left_out = f"rm -rf {prefix}/{_LEFT_OUT[name]}; \\\n    " if name in _LEFT_OUT else ""
    link = f"ln -s /opt/fks-clis/{name}/bin/{program} /out/usr/local/bin/{program}; \\\n    "
    if name == "opencode":
        link = _opencode_seed()
    return f"""FROM node AS cli-{name}
ARG NPM_REGISTRY=https://registry.npmjs.org
RUN set -eux; \\
    export PATH=/node/usr/local/bin:$PATH HOME=/tmp/npm-home \\
        NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt; \\
    node /opt/npm/bin/npm-cli.js install --global --prefix {prefix} \\
        --registry "$NPM_REGISTRY" --no-audit --no-fund --no-update-notifier \\
        --loglevel=error {package}; \\
    {left_out}mkdir -p /out/usr/local/bin; \\
    {link}HOME=/tmp timeout {_CHECK_TIMEOUT_S} {prefix}/bin/{program} --version; \\
    rm -rf /tmp/npm-home

"""


_OPENCODE_WRAPPER = (
    "#!/bin/sh",
    "# fks: OpenCode with its config folder as after its first start (images/clis.py).",
    'config="${XDG_CONFIG_HOME:-$HOME/.config}/opencode"',
    'if [ ! -e "$config" ] && mkdir -p "$config" 2>/dev/null; then',
    f'    cp {_OPENCODE_SEED}/package.json {_OPENCODE_SEED}/package-lock.json "$config/"',
    f'    ln -s {_OPENCODE_SEED}/node_modules "$config/node_modules"',
    "fi",
    'exec /opt/fks-clis/opencode/bin/opencode "$@"',
)


def _opencode_seed() -> str:
    """The shell lines that install OpenCode's plugin package in the seed folder and put the
    wrapper where `opencode` is run from."""
    lines = " ".join(shlex.quote(line) for line in _OPENCODE_WRAPPER)
    return f"""node /opt/npm/bin/npm-cli.js install --prefix /out{_OPENCODE_SEED} \\
        --registry "$NPM_REGISTRY" --no-audit --no-fund --no-update-notifier \\
        --loglevel=error --save-exact {OPENCODE_PLUGIN_PACKAGE}; \\
    printf '%s\\n' {lines} > /out/usr/local/bin/opencode; \\
    chmod 755 /out/usr/local/bin/opencode; \\
    """
