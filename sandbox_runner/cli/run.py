"""`fks run`: a DSL or named chain; arguments after a bare `--` go to every agent."""

from pathlib import Path
from typing import Annotated

import typer

from sandbox_runner.cli.common import handled
from sandbox_runner.cli.options import (
    AllowOption,
    BaseOption,
    ConfigOption,
    CwdOption,
    EngineOption,
    ImageOption,
    MaxCostOption,
    RuntimeOption,
    SandboxOption,
)
from sandbox_runner.errors import UsageError

global_agent_args: list[str] = []
"""What followed a bare `--` on `fks run` (the seed's "global args"), set by `split_agent_args`."""

TargetsArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[DSL] [VAR=VALUE]...",
        help="The DSL (unless --chain), then VAR=VALUE pairs for ${VAR} substitution.",
        show_default=False,
    ),
]
ChainOption = Annotated[
    str | None,
    typer.Option("--chain", "-c", metavar="NAME", help="Run this chain from the config."),
]
PromptOption = Annotated[
    str | None,
    typer.Option(
        "--prompt",
        "-p",
        metavar="TEXT",
        help="Prompt for every step (overrides config prompts).",
    ),
]
PromptFileOption = Annotated[
    Path | None,
    typer.Option(
        "--prompt-file",
        metavar="FILE",
        help="Read the prompt for every step from this file (relative to --cwd).",
    ),
]
VerboseOption = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help=(
            "Stream all agent output line by line (no live view on a terminal) and show "
            "each step's command, cwd and prompt before it runs; with --sandbox, each phase "
            "of the sandbox's work (workspace, container, checkout, export, import, merge) "
            "with its time."
        ),
    ),
]
DryRunOption = Annotated[
    bool,
    typer.Option("--dry-run", help="Print each step's command, cwd and prompt; run nothing."),
]
RunJsonOption = Annotated[
    bool,
    typer.Option(
        "--json", help="Print the chain result as JSON on stdout (progress goes to stderr)."
    ),
]
JunitOption = Annotated[
    Path | None,
    typer.Option(
        "--junit", metavar="FILE", help="Write a JUnit XML report here (each step a test case)."
    ),
]
ResumeOption = Annotated[
    str | None,
    typer.Option(
        "--resume",
        metavar="RUN",
        help="Continue run RUN (id, id prefix or `last`) from its first unfinished step.",
    ),
]
MoreOption = Annotated[
    int,
    typer.Option(
        "--more",
        min=0,
        metavar="N",
        help="With --resume: allow N iterations beyond the step's maximum.",
    ),
]
NoProgressLimitOption = Annotated[
    int | None,
    typer.Option(
        "--no-progress-limit",
        min=0,
        metavar="N",
        help=(
            "Stop a looping step after N iterations in a row without a commit or file change, "
            "or with the same error (default: config, else 3; 0: never)."
        ),
    ),
]
PrOption = Annotated[
    bool,
    typer.Option(
        "--pr",
        help=(
            "With --sandbox: land on a branch of its own (fks/pr/<chain>), push it and open a "
            "draft GitHub pull request into the base, or update the open one "
            "(token: GITHUB_TOKEN, GH_TOKEN or gh auth token; settings: `pr` in the config)."
        ),
    ),
]


@handled
def run_cmd(
    ctx: typer.Context,
    targets: TargetsArgument = None,
    chain: ChainOption = None,
    cwd: CwdOption = None,
    config: ConfigOption = None,
    prompt: PromptOption = None,
    prompt_file: PromptFileOption = None,
    verbose: VerboseOption = False,
    dry_run: DryRunOption = False,
    json_output: RunJsonOption = False,
    sandbox: SandboxOption = False,
    base: BaseOption = None,
    image: ImageOption = None,
    engine: EngineOption = None,
    runtime: RuntimeOption = None,
    allow: AllowOption = None,
    max_cost: MaxCostOption = None,
    junit: JunitOption = None,
    resume: ResumeOption = None,
    more: MoreOption = 0,
    no_progress_limit: NoProgressLimitOption = None,
    pr: PrOption = False,
) -> int:
    from sandbox_runner.commands.run import RunRequest, run

    for target in targets or []:
        if target.startswith("-") and not target.startswith("->"):  # the DSL arrow
            raise UsageError(
                f"no such option: {target}{_close_option(ctx, target)} (see 'fks run --help')"
            )
    request = RunRequest(
        targets=tuple(targets or ()),
        chain=chain,
        cwd=cwd,
        config=config,
        prompt=prompt,
        prompt_file=prompt_file,
        verbose=verbose,
        dry_run=dry_run,
        json_output=json_output,
        sandbox=sandbox,
        base=base,
        image=image,
        engine=engine,
        runtime=runtime,
        allow=tuple(allow or ()),
        max_cost=max_cost,
        junit=junit,
        resume=resume,
        more=more,
        no_progress_limit=no_progress_limit,
        pr=pr,
        global_args=tuple(global_agent_args),
    )
    return run(request)


def _close_option(ctx: typer.Context, given: str) -> str:
    """` (did you mean --x?)` for an option of the running command close to `given`."""
    import difflib

    name = given.partition("=")[0]
    options = [o for p in ctx.command.params for o in p.opts]
    close = difflib.get_close_matches(name, [o for o in options if o.startswith("--")], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def split_agent_args(argv: list[str]) -> list[str]:
    """`fks run DSL -- --flag v`: everything after `--` goes to every agent, untouched."""
    if argv and argv[0] == "run" and "--" in argv:
        cut = argv.index("--")
        global_agent_args[:] = argv[cut + 1 :]
        return argv[:cut]
    return argv


def register(app: typer.Typer) -> None:
    app.command(
        "run",
        help=(
            'Run a DSL chain (`fks run "planner:3 -> builder:10"`) or a named chain '
            "(`fks run --chain ralph TASK=T-1`).\n\n"
            "`agent` runs once; `agent:N` loops up to N times until the agent prints "
            "FORKHESTRA_COMPLETE on its own stdout line. Arguments after `--` are passed to every agent.\n\n"
            "When the run ends, the config's `notify` places (Apprise URLs) are told how it "
            "ended; a place that fails never fails the run (docs/notifications.md).\n\n"
            "Exit codes: 0 complete, 1 a step did not complete, 2 usage/config error, 130 interrupted."
        ),
        # A DSL may start with `->` (a mistake the DSL parser explains); click would call it an option.
        context_settings={"ignore_unknown_options": True},
    )(run_cmd)
