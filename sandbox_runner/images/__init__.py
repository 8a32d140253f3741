"""The images fks builds and moves between engines: `fks image build` and `fks image push`.

One folder per image with its Dockerfile (`agent/`, the sandbox; `proxy/`, the egress proxy;
`layer/`, the agent layer `--from` puts on a user's image); `build` assembles their build
contexts and builds them, `build_helper` runs inside the build (the claude binary, the slim root
file system), `base_image` chooses the base they are built FROM or makes a Debian one with
debootstrap where no registry is reachable, `derived` and `devcontainer` put the agent layer on a
user's image or devcontainer, `versions` says which Claude Code and fks an image holds, `lookup`
finds, requires and pulls images on an engine, `push` sends images to another engine through the
API. The Docker backend imports this package, never the reverse: it connects through
`sandbox_runner.docker_daemon`, and `push` is given the function that reaches another engine.
"""
