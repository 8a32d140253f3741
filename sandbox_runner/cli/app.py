"""The `fks` command line: parse options, call `sandbox_runner.commands.*`, map errors to exit codes.

Nothing heavy is imported here (no docker, no git, no pydantic): `fks --help` must start fast.
No `from __future__ import annotations` here on purpose: typer reads every option's annotation
with `get_type_hints`, and evaluating them once at import is ~10 ms cheaper than compiling
postponed strings at every start.
"""

import functools
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ParamSpec

import typer

from sandbox_runner import __version__
from sandbox_runner.errors import EXIT_INTERRUPTED, FksError, Interrupted, UsageError

P = ParamSpec("P")

app = typer.Typer(
    name="fks",
    help=(
        "Run coding agents unattended: in loops until they print FORKHESTRA_COMPLETE, "
        "in chains of steps, optionally each step in disposable Docker containers on "
        "a branch and workspace of its own."
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
image_app = typer.Typer(
    help="Build the agent image the sandbox runs; push it to other engines.", no_args_is_help=True
)
app.add_typer(image_app, name="image")

# Arguments after a bare `--` on `fks run` are passed to every agent (the seed's "global args").
_global_agent_args: list[str] = []


def _handled(fn: Callable[P, int | None]) -> Callable[P, None]:
    """Turn a command's return code and FksError/Ctrl-C into typer exits with documented codes."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            code = fn(*args, **kwargs)
        except FksError as exc:
            print(f"fks: {exc}", file=sys.stderr)
            raise typer.Exit(exc.exit_code) from None
        except (Interrupted, KeyboardInterrupt):
            print("fks: interrupted", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        raise typer.Exit(code or 0)

    return wrapper


def _version_callback(value: bool) -> None:
    if value:
        print(f"fks {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_version_callback,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """fks: loops and chains of coding agents."""


CwdOption = Annotated[
    Path | None,
    typer.Option(
        "--cwd",
        metavar="DIR",
        help="Project directory the agents work in (default: the current directory).",
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        metavar="FILE",
        help="Config file (default: forge/chains.json in <cwd> or the nearest directory above it in the repository).",
    ),
]


# `fks run`'s arguments and options, so that `run_cmd` reads as a parameter list.
RunTargetsArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[DSL] [VAR=VALUE]...",
        help="The DSL (unless --chain), then VAR=VALUE pairs for ${VAR} substitution.",
        show_default=False,
    ),
]
RunChainOption = Annotated[
    str | None,
    typer.Option("--chain", "-c", metavar="NAME", help="Run this chain from the config."),
]
RunPromptOption = Annotated[
    str | None,
    typer.Option(
        "--prompt",
        "-p",
        metavar="TEXT",
        help="Prompt for every step (overrides config prompts).",
    ),
]
RunPromptFileOption = Annotated[
    Path | None,
    typer.Option(
        "--prompt-file",
        metavar="FILE",
        help="Read the prompt for every step from this file (relative to --cwd).",
    ),
]
RunVerboseOption = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help=(
            "Stream all agent output line by line (no live view on a terminal) and show "
            "each step's command, cwd and prompt before it runs."
        ),
    ),
]
RunDryRunOption = Annotated[
    bool,
    typer.Option("--dry-run", help="Print each step's command, cwd and prompt; run nothing."),
]
RunJsonOption = Annotated[
    bool,
    typer.Option(
        "--json", help="Print the chain result as JSON on stdout (progress goes to stderr)."
    ),
]
RunSandboxOption = Annotated[
    bool,
    typer.Option(
        "--sandbox",
        help="Run every step in Docker containers, on a branch and workspace of its own.",
    ),
]
RunBaseOption = Annotated[
    str | None,
    typer.Option(
        "--base",
        metavar="BRANCH",
        help="Branch the sandboxed steps start from and merge into (default: the current branch).",
    ),
]
RunImageOption = Annotated[
    str | None,
    typer.Option(
        "--image",
        metavar="IMAGE",
        help="Agent image for --sandbox (default: config, else fks-agent:latest).",
    ),
]
RunEngineOption = Annotated[
    str | None,
    typer.Option(
        "--engine",
        metavar="ENGINE",
        help=(
            "Docker engine for --sandbox (default: config sandbox.engine, else local): local, "
            "tcp://HOST:PORT, ssh://USER@HOST, context:NAME or swarm."
        ),
    ),
]
RunAllowOption = Annotated[
    list[str] | None,
    typer.Option(
        "--allow",
        metavar="HOST[:PORT]",
        help="Let --sandbox agents reach HOST (ports 443 and 80, or PORT) for this run; repeatable.",
    ),
]
RunMaxCostOption = Annotated[
    float | None,
    typer.Option(
        "--max-cost",
        metavar="USD",
        help="Budget in USD: a Claude agent stops at the turn that crosses it, nothing more starts.",
    ),
]
ForgeMaxTaskCostOption = Annotated[
    float | None,
    typer.Option(
        "--max-task-cost",
        metavar="USD",
        help="Fail a task once it has spent this many USD (default: forge.maxTaskCost).",
    ),
]
RunJunitOption = Annotated[
    Path | None,
    typer.Option(
        "--junit", metavar="FILE", help="Write a JUnit XML report here (each step a test case)."
    ),
]
RunResumeOption = Annotated[
    str | None,
    typer.Option(
        "--resume",
        metavar="RUN",
        help="Continue run RUN (id, id prefix or `last`) from its first unfinished step.",
    ),
]
RunMoreOption = Annotated[
    int,
    typer.Option(
        "--more",
        min=0,
        metavar="N",
        help="With --resume: allow N iterations beyond the step's maximum.",
    ),
]
RunNoProgressLimitOption = Annotated[
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


@app.command(
    "run",
    help=(
        'Run a DSL chain (`fks run "planner:3 -> builder:10"`) or a named chain '
        "(`fks run --chain ralph TASK=T-1`).\n\n"
        "`agent` runs once; `agent:N` loops up to N times until the agent prints "
        "FORKHESTRA_COMPLETE on its own stdout line. Arguments after `--` are passed to every agent.\n\n"
        "Exit codes: 0 complete, 1 a step did not complete, 2 usage/config error, 130 interrupted."
    ),
    # A DSL may start with `->` (a mistake the DSL parser explains); click would call it an option.
    context_settings={"ignore_unknown_options": True},
)
@_handled
def run_cmd(
    ctx: typer.Context,
    targets: RunTargetsArgument = None,
    chain: RunChainOption = None,
    cwd: CwdOption = None,
    config: ConfigOption = None,
    prompt: RunPromptOption = None,
    prompt_file: RunPromptFileOption = None,
    verbose: RunVerboseOption = False,
    dry_run: RunDryRunOption = False,
    json_output: RunJsonOption = False,
    sandbox: RunSandboxOption = False,
    base: RunBaseOption = None,
    image: RunImageOption = None,
    engine: RunEngineOption = None,
    allow: RunAllowOption = None,
    max_cost: RunMaxCostOption = None,
    junit: RunJunitOption = None,
    resume: RunResumeOption = None,
    more: RunMoreOption = 0,
    no_progress_limit: RunNoProgressLimitOption = None,
) -> int:
    from sandbox_runner.commands import run as run_command

    for target in targets or []:
        if target.startswith("-") and not target.startswith("->"):  # the DSL arrow
            raise UsageError(
                f"no such option: {target}{_close_option(ctx, target)} (see 'fks run --help')"
            )
    request = run_command.RunRequest(
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
        allow=tuple(allow or ()),
        max_cost=max_cost,
        junit=junit,
        resume=resume,
        more=more,
        no_progress_limit=no_progress_limit,
        global_args=tuple(_global_agent_args),
    )
    return run_command.run(request)


def _close_option(ctx: typer.Context, given: str) -> str:
    """` (did you mean --x?)` for an option of the running command close to `given`."""
    import difflib

    name = given.partition("=")[0]
    options = [o for p in ctx.command.params for o in p.opts]
    close = difflib.get_close_matches(name, [o for o in options if o.startswith("--")], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


@app.command("chains", help="List the chains in the config with their descriptions.")
@_handled
def chains_cmd(cwd: CwdOption = None, config: ConfigOption = None) -> int:
    from sandbox_runner.commands import chains

    return chains.run(cwd=cwd, config=config)


@app.command("validate", help="Load and check the config; exit 2 on problems.")
@_handled
def validate_cmd(cwd: CwdOption = None, config: ConfigOption = None) -> int:
    from sandbox_runner.commands import validate

    return validate.run(cwd=cwd, config=config)


@app.command(
    "init",
    help=(
        "Scaffold ralph/, system-prompts/fk/ and forge/chains.json (never overwrites) at the "
        "top of the git repository (or in --cwd)."
    ),
)
@_handled
def init_cmd(cwd: CwdOption = None) -> int:
    from sandbox_runner.commands import init

    return init.run(cwd=cwd)


@app.command(
    "runs",
    help=(
        "List recorded runs (id, chain, start, duration, status, steps, cost), oldest first, "
        "then the totals; a `fks forge run`'s task runs are grouped under it with their titles."
    ),
)
@_handled
def runs_cmd(
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="WHEN",
            help="Only runs started since WHEN: an age (30m, 12h, 7d, 2w) or a date [and time].",
        ),
    ] = None,
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            metavar="STATUS",
            help="Only runs with this status (running, complete, incomplete, interrupted, "
            "failed, died); repeatable or comma-separated.",
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", "-n", min=0, metavar="N", help="Only the newest N of those."),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the runs and totals as JSON.")
    ] = False,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.commands import listing

    selection = listing.RunFilter(
        since=listing.parse_since(since) if since is not None else None,
        statuses=listing.parse_statuses(status or []),
        limit=limit,
    )
    return listing.list_runs(cwd=cwd, selection=selection, json_output=json_output)


@app.command(
    "show", help="Show a run's steps and iterations. RUN is an id, an id prefix or `last`."
)
@_handled
def show_cmd(
    run_id: Annotated[str, typer.Argument(metavar="RUN")] = "last", cwd: CwdOption = None
) -> int:
    from sandbox_runner.commands import runs

    return runs.show(run_ref=run_id, cwd=cwd)


@app.command(
    "logs",
    help="Print what a run's iterations wrote (STEP is a step number): a Claude transcript as"
    " readable text, other output with control sequences removed; --raw for the bytes as written.",
)
@_handled
def logs_cmd(
    run_id: Annotated[str, typer.Argument(metavar="RUN")] = "last",
    step: Annotated[int | None, typer.Argument(metavar="[STEP]", min=1)] = None,
    iteration: Annotated[
        int | None,
        typer.Option("--iteration", "-i", min=1, metavar="N", help="Only this iteration."),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option("--follow", "-f", help="Keep printing output as a running run writes it."),
    ] = False,
    raw: Annotated[
        bool, typer.Option("--raw", help="The bytes as the agent wrote them, unchanged.")
    ] = False,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.commands import logs

    options = logs.LogsOptions(
        run_ref=run_id, step=step, iteration=iteration, follow=follow, raw=raw, cwd=cwd
    )
    return logs.logs(options)


@app.command("review", help="Show each step's branch of a run: commits, diffstat, merged or not.")
@_handled
def review_cmd(
    run_id: Annotated[str, typer.Argument(metavar="RUN")] = "last",
    diff: Annotated[bool, typer.Option("--diff", help="Print the full diff of each step.")] = False,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.commands import review

    return review.run(run_ref=run_id, diff=diff, cwd=cwd)


@app.command(
    "clean",
    help="Remove what dead runs of this repository left, on every engine they used: containers, services and workspaces (their work saved to their branches first), optionally branches and records.",
)
@_handled
def clean_cmd(
    older_than: Annotated[
        float | None,
        typer.Option(
            "--older-than", metavar="DAYS", help="Also delete run records older than DAYS."
        ),
    ] = None,
    branches: Annotated[
        bool,
        typer.Option(
            "--branches",
            help="Also delete step and forge task branches whose work landed on their base or "
            "that hold no commit of their own.",
        ),
    ] = False,
    every: Annotated[
        bool,
        typer.Option(
            "--all", help="Clean up after dead runs of every repository, not only this one."
        ),
    ] = False,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.commands import clean

    options = clean.CleanOptions(older_than=older_than, branches=branches, every=every, cwd=cwd)
    return clean.run(options)


ImageBaseOption = Annotated[
    str | None,
    typer.Option(
        "--base-image", metavar="IMAGE", help="Base image (default: debian:bookworm-slim)."
    ),
]
ImageCaCertOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--ca-cert",
        metavar="FILE",
        help="Extra CA certificate to trust in the image (repeatable).",
    ),
]
ImageTagOption = Annotated[
    str | None,
    typer.Option("--tag", metavar="IMAGE", help="Image tag (default: fks-agent:latest)."),
]
ImageClaudeVersionOption = Annotated[
    str | None,
    typer.Option(
        "--claude-version",
        metavar="VERSION",
        help="Claude Code release (X.Y.Z or latest) to put in the image (default: the one "
        "this fks pins).",
    ),
]


@image_app.command(
    "build",
    help="Build and tag the agent image (falls back to a locally made base when the public one cannot be pulled).",
)
@_handled
def image_build_cmd(
    base_image: ImageBaseOption = None,
    ca_cert: ImageCaCertOption = None,
    tag: ImageTagOption = None,
    claude_version: ImageClaudeVersionOption = None,
    from_image: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="IMAGE",
            help="Put the agent layer on your own (Debian/Ubuntu based) image instead; the "
            "result is tagged fks-agent:from-<image>-<hash of its inputs>.",
        ),
    ] = None,
    devcontainer: Annotated[
        bool,
        typer.Option(
            "--devcontainer",
            help="Build from the devcontainer.json in PATH (default: the current directory's "
            ".devcontainer/), with the agent layer on top.",
        ),
    ] = False,
    path: Annotated[
        Path | None,
        typer.Argument(
            metavar="[PATH]",
            help="With --devcontainer: a devcontainer.json or the folder holding it.",
        ),
    ] = None,
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
    )
    return image.build(options)


@image_app.command(
    "push",
    help=(
        "Make the agent image (and the egress proxy's) present on another Docker engine through "
        "its API, with no registry: sent as `docker save | docker load` unless that engine has "
        "an image with the same id already."
    ),
)
@_handled
def image_push_cmd(
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            metavar="ENGINE",
            help="tcp://HOST:PORT (DOCKER_TLS_VERIFY/DOCKER_CERT_PATH apply), ssh://USER@HOST or context:NAME.",
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


@app.command(
    "tasks",
    help="The forge-tasks task database (same as `forge-tasks`; see `fks tasks --help`).",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def tasks_cmd(ctx: typer.Context) -> None:
    # Loaded only when used: every other command starts faster without it.
    from sandbox_runner.tasks.cli import app as tasks_app

    tasks_app(args=list(ctx.args), prog_name="fks tasks")


forge_app = typer.Typer(
    help=(
        "The analyze -> implement -> review pipeline over forge-tasks: each ready task is analyzed, "
        "implemented on its own branch, reviewed (and sent back when rejected), then landed through "
        "a merge queue. Tasks run in parallel, each in its own worktree or, with --sandbox, containers."
    ),
    no_args_is_help=True,
)
app.add_typer(forge_app, name="forge")

ForgeTasksArgument = Annotated[
    list[str] | None,
    typer.Argument(metavar="[TASK_ID]...", help="Tasks to process (default: every ready one)."),
]
ForgeParallelOption = Annotated[
    int | None,
    typer.Option(
        "--parallel",
        "-j",
        metavar="N",
        help="Tasks processed at once (default: forge.parallel, 1).",
    ),
]
ForgeResumeOption = Annotated[
    bool,
    typer.Option("--resume", help="Also continue tasks an interrupted run left unfinished."),
]
ForgeJsonOption = Annotated[
    bool, typer.Option("--json", help="Print the tasks' results as JSON on stdout.")
]
ForgeJunitOption = Annotated[
    Path | None,
    typer.Option(
        "--junit", metavar="FILE", help="Write a JUnit XML report (one test case per task)."
    ),
]


@forge_app.command(
    "run",
    help=(
        "Process ready tasks (To Do, dependencies Done), or the given ones, up to --parallel at a "
        "time. Exit codes: 0 every task landed, 1 one did not (failed, waiting for an answer, "
        "or --max-cost), 2 usage/config error, 130 interrupted."
    ),
)
@_handled
def forge_run_cmd(
    tasks: ForgeTasksArgument = None,
    parallel: ForgeParallelOption = None,
    sandbox: RunSandboxOption = False,
    base: RunBaseOption = None,
    image: RunImageOption = None,
    engine: RunEngineOption = None,
    allow: RunAllowOption = None,
    max_cost: RunMaxCostOption = None,
    max_task_cost: ForgeMaxTaskCostOption = None,
    resume: ForgeResumeOption = False,
    force: Annotated[
        bool, typer.Option("--force", help="Process the named tasks anew, even landed ones.")
    ] = False,
    json_output: ForgeJsonOption = False,
    junit: ForgeJunitOption = None,
    cwd: CwdOption = None,
    config: ConfigOption = None,
) -> int:
    from sandbox_runner.commands import forge

    return forge.run(
        forge.ForgeOptions(
            tasks=tuple(tasks or ()),
            parallel=parallel,
            sandbox=sandbox,
            base=base,
            image=image,
            engine=engine,
            allow=tuple(allow or ()),
            max_cost=max_cost,
            max_task_cost=max_task_cost,
            resume=resume,
            force=force,
            json_output=json_output,
            junit=junit,
            cwd=cwd,
            config=config,
        )
    )


@forge_app.command("_worker", hidden=True)
@_handled
def forge_worker_cmd(
    task: Annotated[str, typer.Argument()],
    session: Annotated[str, typer.Option("--session")],
    mode: Annotated[str, typer.Option("--mode")] = "named",
    sandbox: RunSandboxOption = False,
    base: RunBaseOption = None,
    image: RunImageOption = None,
    engine: RunEngineOption = None,
    allow: RunAllowOption = None,
    max_cost: RunMaxCostOption = None,
    max_task_cost: ForgeMaxTaskCostOption = None,
    resume: ForgeResumeOption = False,
    cwd: CwdOption = None,
    config: ConfigOption = None,
) -> int:
    from sandbox_runner.commands import forge

    options = forge.ForgeOptions(
        sandbox=sandbox,
        base=base,
        image=image,
        engine=engine,
        allow=tuple(allow or ()),
        max_cost=max_cost,
        max_task_cost=max_task_cost,
        resume=resume,
        cwd=cwd,
        config=config,
        session=session,
        mode=mode,
    )
    return forge.worker(options, task)


ForgeTaskArgument = Annotated[str, typer.Argument(metavar="TASK_ID")]


@forge_app.command(
    "land",
    help=(
        "Land an approved task whose landing was blocked (no agent runs). Exit codes: 0 landed, "
        "1 not (the reason shown), 2 not approved or usage error."
    ),
)
@_handled
def forge_land_cmd(
    task: ForgeTaskArgument,
    base: RunBaseOption = None,
    cwd: CwdOption = None,
    config: ConfigOption = None,
) -> int:
    from sandbox_runner.commands import forge_task
    from sandbox_runner.commands.forge import ForgeOptions

    return forge_task.land(ForgeOptions(base=base, cwd=cwd, config=config), task)


@forge_app.command(
    "retry",
    help=(
        "Run a failed or interrupted task again from the stage it stopped at, with fresh review "
        "retries (a rejected one goes back to Implement with the review). Exit codes as run."
    ),
)
@_handled
def forge_retry_cmd(
    task: ForgeTaskArgument,
    sandbox: RunSandboxOption = False,
    base: RunBaseOption = None,
    image: RunImageOption = None,
    engine: RunEngineOption = None,
    allow: RunAllowOption = None,
    max_cost: RunMaxCostOption = None,
    json_output: ForgeJsonOption = False,
    cwd: CwdOption = None,
    config: ConfigOption = None,
) -> int:
    from sandbox_runner.commands import forge_task
    from sandbox_runner.commands.forge import ForgeOptions

    options = ForgeOptions(
        sandbox=sandbox,
        base=base,
        image=image,
        engine=engine,
        allow=tuple(allow or ()),
        max_cost=max_cost,
        json_output=json_output,
        cwd=cwd,
        config=config,
    )
    return forge_task.retry(options, task)


@forge_app.command(
    "reset",
    help="Forget a task's forge state: its next run starts from Analyze on a fresh branch.",
)
@_handled
def forge_reset_cmd(task: ForgeTaskArgument, cwd: CwdOption = None) -> int:
    from sandbox_runner.commands import forge_task

    return forge_task.reset(cwd=cwd, task=task)


@forge_app.command(
    "show", help="A task's history across runs: stages, attempts, costs, results, branch, commits."
)
@_handled
def forge_show_cmd(
    task: ForgeTaskArgument, cwd: CwdOption = None, json_output: ForgeJsonOption = False
) -> int:
    from sandbox_runner.commands import forge_task

    return forge_task.show(cwd=cwd, task=task, json_output=json_output)


@forge_app.command(
    "status", help="Each task's status, stage, attempts, cost, branch, and what it waits for."
)
@_handled
def forge_status_cmd(cwd: CwdOption = None, json_output: ForgeJsonOption = False) -> int:
    from sandbox_runner.commands import forge

    return forge.status(cwd=cwd, json_output=json_output)


@forge_app.command("clarifications", help="Questions the agents need a human to answer.")
@_handled
def forge_clarifications_cmd(cwd: CwdOption = None) -> int:
    from sandbox_runner.commands import forge

    return forge.clarifications(cwd=cwd)


@forge_app.command(
    "answer", help="Answer a task's question; the next `fks forge run` continues the task."
)
@_handled
def forge_answer_cmd(
    task: Annotated[str, typer.Argument(metavar="TASK_ID")],
    text: Annotated[str | None, typer.Argument(metavar="[TEXT]", help="The answer.")] = None,
    file: Annotated[
        Path | None, typer.Option("--file", metavar="FILE", help="Read the answer from FILE.")
    ] = None,
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.commands import forge

    return forge.answer(cwd=cwd, task=task, text=text, file=file)


@forge_app.command("create", help="Add a task (the same as `forge-tasks create`).")
@_handled
def forge_create_cmd(
    title: Annotated[
        str, typer.Argument(metavar="TITLE", help="One line saying what the task delivers.")
    ],
    description: Annotated[
        str, typer.Option("--description", "-d", metavar="TEXT", help="Why the task exists.")
    ] = "",
    ac: Annotated[
        list[str] | None,
        typer.Option("--ac", metavar="TEXT", help="An acceptance criterion (repeatable)."),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option("--label", "-l", metavar="LABEL", help="A label (repeatable; commas split)."),
    ] = None,
    priority: Annotated[
        str,
        typer.Option("--priority", "-p", metavar="PRIORITY", help="high, medium or low."),
    ] = "medium",
    depends_on: Annotated[
        list[str] | None,
        typer.Option(
            "--depends-on",
            metavar="TASK_ID",
            help="Id of a task that must be Done first (repeatable).",
        ),
    ] = None,
    status: Annotated[
        str,
        typer.Option(
            "--status", "-s", metavar="STATUS", help="To Do, In Progress, Done or Blocked."
        ),
    ] = "To Do",
    cwd: CwdOption = None,
) -> int:
    from sandbox_runner.commands import forge

    options = forge.CreateOptions(
        title=title,
        cwd=cwd,
        description=description,
        criteria=tuple(ac or ()),
        labels=tuple(label or ()),
        priority=priority,
        depends_on=tuple(depends_on or ()),
        status=status,
    )
    return forge.create(options)


@forge_app.command(
    "parent",
    help=(
        "Talk to an interactive Claude that drives these subcommands for you (fks is replaced by "
        "`claude`; arguments after -- go to it)."
    ),
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
@_handled
def forge_parent_cmd(ctx: typer.Context, cwd: CwdOption = None) -> int:
    from sandbox_runner.commands import forge

    return forge.parent(cwd=cwd, args=list(ctx.args))


@app.command("schema", help="Print the JSON Schema of forge/chains.json (for editors).")
@_handled
def schema_cmd() -> int:
    from sandbox_runner.commands import schema

    return schema.run()


def _split_global_args(argv: list[str]) -> list[str]:
    """`fks run DSL -- --flag v`: everything after `--` goes to every agent, untouched."""
    if argv and argv[0] == "run" and "--" in argv:
        cut = argv.index("--")
        _global_agent_args[:] = argv[cut + 1 :]
        return argv[:cut]
    return argv


def main() -> None:
    from sandbox_runner.ui.pipes import tolerate_closed_pipes

    tolerate_closed_pipes()
    argv = _split_global_args(sys.argv[1:])
    try:
        app(args=argv, prog_name="fks")
    except SystemExit:
        raise
    except (Interrupted, KeyboardInterrupt):
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:  # an fks bug: keep the screen readable, keep the details
        fd, path = tempfile.mkstemp(prefix="fks-crash-", suffix=".txt")
        with os.fdopen(fd, "w") as crash:
            traceback.print_exc(file=crash)
        print(
            f"fks: internal error: {type(exc).__name__}: {exc} (traceback in {path})",
            file=sys.stderr,
        )
        sys.exit(3)
