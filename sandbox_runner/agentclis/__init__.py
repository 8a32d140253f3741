"""Agent CLIs fks runs first-class: one adapter per CLI (`claude`, `codex`, `gemini`,
`opencode`) behind the `AgentCli` interface of `api`, found by name in `registry`. An adapter
builds the CLI's headless command, reads each line of its stream into the neutral events of
`events` (text, tool calls and results, usage, the result), and says how its ends map to fks's
end reasons. Imports only modules shared by every layer (`bounded`, `console.units`); `plan`,
`steps` and the displays import it, never the other way round.
"""
