"""`fks run`: plan the chain, check everything that can be checked, then run it."""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox_runner.backends.api import Backend
from sandbox_runner.console.live import LiveReporter
from sandbox_runner.console.output import (
    PREFIX,
    PlainReporter,
    StepDetails,
    iteration_limit,
)
from sandbox_runner.errors import (
    EXIT_COMPLETE,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    FksError,
    UsageError,
)
from sandbox_runner.notify import events as notify_events
from sandbox_runner.outcomes import Status, StepEnd
from sandbox_runner.paths import project_dir
from sandbox_runner.plan.agents import AgentCommand, step_prompt
from sandbox_runner.plan.config import parse_vars
from sandbox_runner.plan.dsl import Step
from sandbox_runner.plan.planned import Planned, plan_run
from sandbox_runner.plan.prompts import PromptSource
from sandbox_runner.records.junit import write_junit
from sandbox_runner.records.masking import Masker
from sandbox_runner.records.record import RunOptions, RunRecord
from sandbox_runner.records.resume import plan_resume
from sandbox_runner.runs.lifecycle import ChainEnd, CheckedBackend, chain_backend, run_planned
from sandbox_runner.steps.reporter import Reporter
from sandbox_runner.steps.tap import LogLimits

if TYPE_CHECKING:
    from sandbox_runner.steps.chain import ChainResult

# The flags a resumed run takes from its record: giving them again is a usage error.
_FIXED_ON_RESUME = (
    "--prompt",
    "--prompt-file",
    "--config",
    "--sandbox",
    "--base",
    "--image",
    "--engine",
    "--runtime",
    "--allow",
    "arguments after --",
)


@dataclass(frozen=True)
class RunRequest:
    """What `fks run` was asked to do (the part a run record keeps is `RunOptions`)."""

    targets: Sequence[str] = ()
    """The DSL (unless `chain`), then VAR=VALUE pairs."""
    chain: str | None = None
    cwd: Path | None = None
    config: Path | None = None
    prompt: str | None = None
    prompt_file: Path | None = None
    verbose: bool = False
    dry_run: bool = False
    json_output: bool = False
    sandbox: bool = False
    base: str | None = None
    image: str | None = None
    engine: str | None = None
    runtime: str | None = None
    allow: Sequence[str] = ()
    max_cost: float | None = None
    junit: Path | None = None
    resume: str | None = None
    more: int = 0
    no_progress_limit: int | None = None
    pr: bool = False
    global_args: Sequence[str] = ()
    """Arguments after `--`, passed to every agent."""


def run(request: RunRequest) -> int:
    """Run a DSL or named chain; returns the exit code (0 complete, 1 incomplete, 130 interrupted)."""
    if request.max_cost is not None and not (
        math.isfinite(request.max_cost) and request.max_cost > 0
    ):
        raise UsageError(f"--max-cost must be a positive amount of USD, got {request.max_cost:g}")
    workdir = project_dir(request.cwd, config=request.config)
    if request.more and request.resume is None:
        raise UsageError("--more only makes sense with --resume RUN")
    targets = list(request.targets)
    options = _recorded_options(request)
    if request.resume is not None:
        planned, record = _plan_resumed(
            request.resume, workdir, options, targets=targets, more=request.more
        )
    else:
        planned, record = _plan_new(options, workdir, targets=targets), None
    planned.no_progress_limit = request.no_progress_limit
    return _run_planned(
        planned,
        record,
        dry_run=request.dry_run,
        verbose=request.verbose,
        json_output=request.json_output,
        junit=request.junit,
        more=request.more,
    )


def _recorded_options(request: RunRequest) -> RunOptions:
    """The options a new run records (a resumed run takes its recorded ones)."""
    targets = list(request.targets)
    variables: dict[str, str] = {}
    if request.resume is None:
        variables = parse_vars(targets if request.chain else targets[1:])
    # Already typed by the CLI: model_construct skips building a validator (start-up time).
    return RunOptions.model_construct(
        chain=request.chain,
        dsl=None,
        variables=variables,
        prompt=request.prompt,
        prompt_file=str(request.prompt_file) if request.prompt_file else None,
        config=str(request.config) if request.config else None,
        sandbox=request.sandbox,
        base=request.base,
        image=request.image,
        engine=request.engine,
        runtime=request.runtime,
        allow=list(request.allow),
        max_cost=request.max_cost,
        global_args=list(request.global_args),
        pr=request.pr,
    )


def _run_planned(
    planned: Planned,
    record: RunRecord | None,
    *,
    dry_run: bool,
    verbose: bool,
    json_output: bool,
    junit: Path | None,
    more: int,
) -> int:
    """Resolve every step's prompt and command on the backend, then show them or run them."""
    options = planned.options
    prompt_file_opt = Path(options.prompt_file) if options.prompt_file else None
    prompts = [
        step_prompt(
            s, planned.plan, planned.agents, planned.cwd, planned.cli_prompt, prompt_file_opt
        )
        for s in planned.plan.steps
    ]
    LogLimits.of_config(
        planned.config
    )  # a bad FKS_MAX_LOG_BYTES is a usage error before anything starts
    _refuse_sandbox_options(planned.options)
    from sandbox_runner.pulls.for_run import run_target  # httpx: only for a pull request

    pr = run_target(planned, dry_run=dry_run)
    if dry_run:
        notify_events.configured(planned.config)  # every URL is checked, none is sent to
        checked = chain_backend(planned, dry_run=True)
        return _dry_run(planned, prompts, checked.commands, checked.backend, json_output)

    def reporter_for(checked: CheckedBackend) -> Reporter:
        details = None
        if verbose:
            details = _verbose_details(planned, prompts, checked.commands, checked.backend)
        return _reporter(json_output=json_output, verbose=verbose, details=details)

    ended = run_planned(planned, record, reporter_for=reporter_for, more=more, pr=pr)
    return _ended(ended, json_output=json_output, junit=junit)


def _plan_resumed(
    resume: str, workdir: Path, given_options: RunOptions, *, targets: Sequence[str], more: int
) -> tuple[Planned, RunRecord]:
    """The recorded run `resume` names, planned again; the flags `_FIXED_ON_RESUME` names must
    not be given again (`given_options`: what this command was given).
    """
    o = given_options
    fixed = (o.prompt, o.prompt_file, o.config, o.sandbox, o.base, o.image, o.engine, o.runtime)
    values = (*fixed, o.allow, o.global_args)
    given = [name for name, value in zip(_FIXED_ON_RESUME, values, strict=True) if value]
    if given:
        raise UsageError(
            f"--resume continues a run as it was started; {', '.join(given)} cannot be changed"
        )
    resumed = plan_resume(resume, cwd=workdir, targets=targets, chain=o.chain, more=more)
    planned, record = resumed.planned, resumed.record
    if o.max_cost is not None:  # a new budget for the rest of the run
        planned.options.max_cost = o.max_cost
    return planned, record


def _plan_new(options: RunOptions, workdir: Path, *, targets: Sequence[str]) -> Planned:
    if options.chain is None:
        if not targets:
            raise UsageError(
                'nothing to run: give a DSL (e.g. fks run "planner:3 -> builder:10") or --chain NAME'
            )
        options.dsl = targets[0]
    return plan_run(options, workdir)


def _ended(ended: ChainEnd, *, json_output: bool, junit: Path | None) -> int:
    """What the user is told of how the run ended, and its exit code."""
    result, reporter = ended.result, ended.reporter
    if result is None:
        print(
            f"{PREFIX} Interrupted ({ended.signal}); continue with: fks run --resume {ended.record.id}",
            file=sys.stderr,
        )
        _after_interrupt(ended.backend, ended.record)
        _write_junit(junit, ended.record)
        return EXIT_INTERRUPTED
    _summary(result, ended.backend, reporter)
    done = ended.record.steps_done
    reporter.chain_ended(result.success, done, result.total, cost=result.cost_usd or None)
    if json_output:
        print(json.dumps(result.to_json(), indent=2))
    _write_junit(junit, ended.record)
    pr_failed = ended.record.pr is not None and ended.record.pr.error is not None
    return EXIT_COMPLETE if result.success and not pr_failed else EXIT_INCOMPLETE


def _write_junit(path: Path | None, record: RunRecord) -> None:
    if path is not None:
        write_junit(path, record)


def _refuse_sandbox_options(options: RunOptions) -> None:
    """--base, --engine and --runtime say where a sandboxed run's containers go."""
    if options.sandbox:
        return
    if options.base:
        raise UsageError("--base only applies to --sandbox runs")
    if options.engine:
        raise UsageError("--engine only applies to --sandbox runs")
    if options.runtime:
        raise UsageError("--runtime only applies to --sandbox runs")
    if options.pr:
        raise UsageError("--pr only applies to --sandbox runs")


def _reporter(*, json_output: bool, verbose: bool, details: StepDetails | None = None) -> Reporter:
    out = sys.stderr if json_output else sys.stdout
    agent_out = sys.stderr.buffer if json_output else sys.stdout.buffer
    if not verbose and out.isatty() and os.environ.get("TERM") != "dumb":
        return LiveReporter(out=out)
    return PlainReporter(out=out, agent_out=agent_out, verbose=verbose, details=details)


def _after_interrupt(backend: Backend, record: RunRecord) -> None:
    for step in record.steps:
        if step.status == Status.INTERRUPTED:
            for line in backend.review_hint(step):
                print(f"{PREFIX} {line}", file=sys.stderr)


def _summary(result: ChainResult, backend: Backend, reporter: Reporter) -> None:
    if result.failed_at is None:
        return
    failed = result.steps[-1]
    why = failed.outcome.describe()
    if not why.startswith("did not complete"):
        why = f"did not complete: {why}"
    reporter.info(f"Step {failed.index} ({failed.agent}) {why}")
    for line in backend.review_hint(failed.record):
        reporter.info(line)
    if failed.outcome.reason == StepEnd.MAX_COST:
        reporter.info(
            f"Continue with a larger budget: fks run --resume {result.run_id} --max-cost USD"
        )


# --- dry run ---------------------------------------------------------------------------------

_SHOW_ARG = 120


def _abbreviate(arg: str) -> str:
    flat = arg.replace("\n", "\\n")
    if len(flat) <= _SHOW_ARG:
        return flat
    return f"{flat[:_SHOW_ARG]}…({len(arg)} chars)"


def _step_plan(
    index: int,
    step: Step,
    prompt: PromptSource,
    command: AgentCommand,
    backend: Backend,
    global_args: Sequence[str],
) -> dict[str, Any]:
    """What a step will run: its argv, cwd and prompt (for --dry-run and --verbose)."""
    text = prompt.read()
    shown, cwd = backend.planned(command)
    return {
        "index": index,
        "agent": step.agent,
        "kind": command.kind,
        "loop": step.loop,
        "iterations": step.iterations,
        "prompt": text,
        "prompt_source": prompt.describe(),
        "argv": shown.argv([*global_args, *step.args], text),
        "cwd": cwd,
        "network": backend.planned_network(step, command),
    }


def _step_lines(plan: dict[str, Any]) -> list[str]:
    """A step plan as the `prompt:`, `command:` and `cwd:` lines both --dry-run and -v show."""
    prompt_text = plan["prompt"]
    shown_prompt = (
        "(none)"
        if prompt_text is None
        else f"{_abbreviate(str(prompt_text))!s}  [{plan['prompt_source']}]"
    )
    return [
        f"prompt:  {shown_prompt}",
        f"command: {shlex.join(_abbreviate(a) for a in plan['argv'])}",
        f"cwd:     {plan['cwd']}",
        *([f"network: {plan['network']}"] if plan.get("network") else []),
    ]


def _verbose_details(
    planned: Planned, prompts: list[PromptSource], commands: list[AgentCommand], backend: Backend
) -> StepDetails:
    """For -v: a step's lines, computed when it starts (prompt files may have changed)."""
    # Lazy, as in `runs.lifecycle`: the chain's modules cost `--dry-run` a tenth of its start-up.
    from sandbox_runner.steps.chain import chain_options

    masker = Masker(chain_options(planned).secrets)
    steps = planned.plan.steps

    def details(index: int) -> list[str]:
        try:
            plan = _step_plan(
                index,
                steps[index - 1],
                prompts[index - 1],
                commands[index - 1],
                backend,
                planned.options.global_args,
            )
        except FksError as exc:  # the step itself reports it; showing it must not stop the run
            return [f"(cannot show the command: {exc})"]
        return [masker.mask_text(line) for line in _step_lines(plan)]

    return details


def _dry_run(
    planned: Planned,
    prompts: list[PromptSource],
    commands: list[AgentCommand],
    backend: Backend,
    json_output: bool,
) -> int:
    steps = [
        _step_plan(index, step, prompt, command, backend, planned.options.global_args)
        for index, (step, prompt, command) in enumerate(
            zip(planned.plan.steps, prompts, commands, strict=True), start=1
        )
    ]
    where = backend.describe()
    if json_output:
        print(json.dumps({"dry_run": True, "sandbox": where, "steps": steps}, indent=2))
        return EXIT_COMPLETE
    print(f"{PREFIX} Dry run - would execute:")
    for line in where:
        print(f"  {line}")
    for s in steps:
        limit = iteration_limit(int(s["iterations"]), bool(s["loop"]))
        print(f"  Step {s['index']}: {s['agent']} ({limit})")
        for line in _step_lines(s):
            print(f"    {line}")
    return EXIT_COMPLETE
