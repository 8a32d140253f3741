"""Every label fks puts on what it creates in Docker, defined once.

Containers, services, volumes, networks and images carry them so that `fks clean`, the
version checks and the swarm can find what belongs to which run, step, repository and role.
This module imports nothing: every layer may read it.
"""

from __future__ import annotations

# Containers, services, volumes and networks of a run.
LABEL_RUN = "fks.run"
LABEL_STEP = "fks.step"
LABEL_PID = "fks.pid"
LABEL_REPO = "fks.repo"
LABEL_ROLE = "fks.role"
LABEL_PROBE = "fks.probe"
# Workspaces (volumes): the image and the runtime (if not the engine's default) their step runs.
LABEL_IMAGE = "fks.image"
LABEL_RUNTIME = "fks.runtime"
LABEL_VOLUME = "fks.workspace"
# Swarm nodes: where the node's Docker socket is.
LABEL_SOCKET = "fks.docker-socket"
# Swarm nodes: the URL fks reaches the node's engine at (to send it images).
LABEL_ENGINE = "fks.docker-engine"
# Images fks builds.
LABEL_USER = "fks.user"
LABEL_FKS_VERSION = "fks.version"
LABEL_CLAUDE_VERSION = "fks.claude-code.version"
LABEL_CLAUDE_PINNED = "fks.claude-code.pinned"
LABEL_AGENT_CLIS = "fks.agent-clis"
"""The other agent CLIs an agent image carries (`fks image build --with`), comma-separated."""
LABEL_TITLE = "org.opencontainers.image.title"
LABEL_FROM = "fks.from"
LABEL_FROM_ID = "fks.from.id"
LABEL_INPUTS = "fks.inputs"
