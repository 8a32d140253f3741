"""The model API a step's agent CLI goes out to through the egress proxy, and what its
container's environment gets for it (the API's base URL through the proxy, a placeholder key).

`api_env` stands in for the egress proxy's own, per API kind: until the proxy serves OpenAI's
and Gemini's APIs beside Anthropic's, only Anthropic's goes through it (Claude, OpenCode), with
the base URL and placeholder the proxy gives every step that uses it.
"""

from __future__ import annotations

from dataclasses import replace

from sandbox_runner.plan.agents import AgentCommand

ANTHROPIC = "anthropic"


def api_env(kind: str) -> dict[str, str]:
    """STUB until the egress proxy serves every API kind: the variables that point a CLI of
    API `kind` at it (base URL through the proxy, placeholder key). Anthropic's come with the
    proxy's own variables; the others' are not served yet: none."""
    return {}


def step_api_env(agent: AgentCommand) -> dict[str, str]:
    """What the container of a step through the egress proxy gets for its agent CLI's API."""
    cli = agent.cli
    if agent.kind != "cli" or cli is None or cli.api == ANTHROPIC:
        return {}
    return api_env(cli.api)


def as_proxy_client(agent: AgentCommand) -> AgentCommand:
    """The step's agent as the egress proxy's pool chooses its upstream by, and as the checks
    of that API's address see it: the pool serves the model API to Claude steps, so an agent
    CLI that speaks Anthropic's API (OpenCode) is shown to it as one (until the pool chooses
    by each CLI's `api` itself)."""
    cli = agent.cli
    if agent.kind == "cli" and cli is not None and cli.api == ANTHROPIC:
        return replace(agent, kind="claude")
    return agent
