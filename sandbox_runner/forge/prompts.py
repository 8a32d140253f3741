"""What each forge agent is told: its system prompt (packaged default, or the project's file) and
its prompt, which always names the task it works on."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from sandbox_runner.errors import ConfigError
from sandbox_runner.forge.models import ReviewResult
from sandbox_runner.forge.work import WorkItem
from sandbox_runner.paths import read_in_project
from sandbox_runner.plan.forge_settings import ForgeSettings

STAGES = ("analyze", "architect", "implement", "review")
PROJECT_PROMPTS = Path("system-prompts") / "forge"
MAX_DIFF = 100_000
"""Bytes of the diff the reviewer gets: it travels in one environment variable into a container,
and the kernel takes at most 128 KiB in one."""
REVIEW_DIFF = ".forge/review.diff"
MAX_TASK_YAML = 100_000
"""Bytes of `.forge/task.yaml` and `.forge/review.yaml` (environment variables in a container)."""
# Each prompt is one command-line argument (at most 128 KiB): what an agent or a task file can
# make long is cut to these bytes, so that every prompt stays under 110 KB.
_DESCRIPTION, _CRITERIA, _ANALYSIS, _DIALOGUE, _FEEDBACK, _PLAN = (
    40_000,
    16_000,
    24_000,
    24_000,
    24_000,
    16_000,
)


def fit(text: str, limit: int, rest: str) -> str:
    """`text` cut to `limit` UTF-8 bytes, saying so and where `rest` is."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore") + f"\n… (cut at {limit // 1000} KB; {rest})"


@dataclass(frozen=True)
class TaskText:
    """The task as the forge-tasks database has it."""

    id: str
    title: str
    description: str = ""
    criteria: tuple[str, ...] = ()

    def block(self) -> str:
        lines = [f"Task {self.id}: {fit(self.title, 1000, 'the task file has the rest')}"]
        if self.description:
            lines += ["", "Description:", fit(self.description, _DESCRIPTION, "see the task file")]
        if self.criteria:
            criteria = "\n".join(f"- {c}" for c in self.criteria)
            lines += ["", "Acceptance criteria:", fit(criteria, _CRITERIA, "see the task file")]
        return "\n".join(lines)


def system_prompt(stage: str, settings: ForgeSettings, project: Path) -> str:
    """The configured file, else `system-prompts/forge/<stage>.md`, else the packaged text."""
    configured = getattr(settings.prompts, stage)
    path = project / (configured or PROJECT_PROMPTS / f"{stage}.md")
    if configured or path.is_file():
        try:
            return read_in_project(path, f"forge.prompts.{stage}")
        except OSError as exc:
            raise ConfigError(
                f"forge.prompts.{stage}: cannot read {path} ({exc.strerror}); fix the path in forge/chains.json"
            ) from None
    packaged = resources.files("sandbox_runner") / "templates" / "init" / "system-prompts"
    return (packaged / "forge" / f"{stage}.md").read_text(encoding="utf-8")


def analyze_prompt(task: TaskText) -> str:
    return f"{task.block()}\n\nAnalyze this task and answer with the structured output."


def architect_prompt(task: TaskText, item: WorkItem) -> str:
    parts = [task.block()]
    if item.analysis is not None:
        analysis = _yaml(item.analysis.model_dump())
        parts.append("The analysis so far:\n" + fit(analysis, _ANALYSIS, "that is all of it"))
    if item.question:
        dialogue = f"Question asked earlier: {item.question}\nThe human's answer: {item.answer}"
        parts.append(fit(dialogue, _DIALOGUE, "that is all of it"))
    parts.append("Resolve what is open and answer with the structured output.")
    return "\n\n".join(parts)


def implement_prompt(task: TaskText, item: WorkItem) -> str:
    parts = [
        task.block(),
        "Implement this task. The plan is in .forge/task.yaml (and the last review, if any, in "
        ".forge/review.yaml); read it first. Commit your work.",
    ]
    if item.feedback:
        feedback = fit(item.feedback, _FEEDBACK, "see .forge/task.yaml")
        parts.append(f"This is attempt {item.attempts}. Address this first:\n{feedback}")
    return "\n\n".join(parts)


def task_yaml(task: TaskText, item: WorkItem) -> str:
    """`.forge/task.yaml` for the Implement agent."""
    data: dict[str, object] = {
        "id": task.id,
        "title": task.title,
        "description": task.description,
        "acceptance_criteria": list(task.criteria),
    }
    if item.analysis is not None:
        data.update(item.analysis.model_dump(exclude={"sufficient"}))
    if item.answer:
        data["clarification"] = {"question": item.question, "answer": item.answer}
    if item.feedback:
        data["feedback"] = item.feedback
    return fit(_yaml(data), MAX_TASK_YAML, "that is all of it")


def review_yaml(review: ReviewResult) -> str:
    """`.forge/review.yaml`: the last review, for the Implement agent that addresses it."""
    return fit(_yaml(review.model_dump()), MAX_TASK_YAML, "that is all of it")


def review_diff(diff: bytes, more: bool) -> tuple[str, bool]:
    """The text of `.forge/review.diff`: the diff, cut to whole lines at MAX_DIFF bytes when it
    is longer (True: it was cut)."""
    if more or len(diff) > MAX_DIFF:
        diff = diff[:MAX_DIFF]
        diff = diff[: diff.rfind(b"\n") + 1] or diff
        more = True
    text = diff.replace(b"\0", b"").decode("utf-8", "replace")
    return text or "(the branch changes no file)\n", more


def review_prompt(task: TaskText, item: WorkItem, base_commit: str, cut: bool) -> str:
    """The reviewer's prompt: the diff itself is in `.forge/review.diff`, never in the prompt
    (a command line holds at most 128 KiB in one argument)."""
    plan = fit(item.analysis.plan, _PLAN, "that is all of it") if item.analysis else "(none)"
    where = f"The diff of the branch against its base {base_commit} is in {REVIEW_DIFF}"
    if cut:
        where += (
            f"; it is longer than {MAX_DIFF // 1000} KB and was cut there (at a line end): read "
            "the changed files themselves for the rest"
        )
    return (
        f"{task.block()}\n\nThe plan was: {plan}\n\n"
        f"Review the implementation. {where}. Read it first.\n\n"
        "Answer with the structured output."
    )


class _Dumper(yaml.SafeDumper):
    """Multi-line text as `|` blocks: the agent reads the file as it would a note."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def _yaml(data: object) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def json_block(prompt: str, schema: str, *, wrong: str | None = None) -> str:
    """A stage's prompt for an agent CLI that cannot be given a JSON Schema: its answer is the
    JSON block it ends with (`wrong`: why its last one did not fit)."""
    again = f"\n\nYour last answer did not fit ({wrong}); answer again." if wrong else ""
    return (
        f"{prompt}{again}\n\nEnd with your answer: one JSON object that fits the JSON Schema "
        f"below, in a ```json block, with nothing after it.\n\nJSON Schema: {schema}"
    )
