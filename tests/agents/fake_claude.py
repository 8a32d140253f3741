#!/usr/bin/env python3
"""A stand-in for `claude -p` that plays the forge agents, for tests of `fks forge` via the CLI.

The stage comes from the system prompt, the task from the prompt. It appends
{"stage", "task", "pid"} to $FAKE_STATE/calls.jsonl, then answers like claude's stream-json:
  analyze    a low-complexity plan
  implement  writes <task>.txt (naming its pid) in its cwd and commits it (subject:
             FAKE_SUBJECT, default "implement <task>")
  review     approves (FAKE_REJECT=1: rejects)
  architect  (FAKE_ASK=1 makes the analysis insufficient) asks "Red or blue?", and resolves once
             its prompt holds the human's answer
Optional:
  FAKE_HOLD=<stage>:<task>  on that stage of that task (*: of the first task to get there),
                            writes the task to $FAKE_STATE/held and waits until $FAKE_STATE/go
                            exists before answering (once)
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

STAGES = {
    "You analyze one task": "analyze",
    "You implement one task": "implement",
    "You review the implementation": "review",
    "The analysis of this task was not sufficient": "architect",
}

argv = sys.argv[1:]
prompt = argv[argv.index("-p") + 1] if "-p" in argv else ""
system = argv[argv.index("--append-system-prompt") + 1] if "--append-system-prompt" in argv else ""
stage = next((s for mark, s in STAGES.items() if mark in system), "other")
found = re.search(r"TASK-[0-9a-z]+", prompt)
task = found.group(0) if found else "?"
state = Path(os.environ["FAKE_STATE"])
state.mkdir(parents=True, exist_ok=True)
with (state / "calls.jsonl").open("a") as calls:
    calls.write(json.dumps({"stage": stage, "task": task, "pid": os.getpid()}) + "\n")

if (
    os.environ.get("FAKE_HOLD") in (f"{stage}:{task}", f"{stage}:*")
    and not (state / "held").exists()
):
    (state / "held").write_text(task)
    while not (state / "go").exists():
        time.sleep(0.05)

answer: object = None
plan = {"complexity": "low", "plan": "Write the file."}
if stage == "analyze":
    answer = {**plan, "sufficient": not os.environ.get("FAKE_ASK")}
elif stage == "architect" and "The human's answer" in prompt:
    answer = {"resolved": True, "analysis": plan}
elif stage == "architect":
    answer = {"resolved": False, "analysis": None, "question": "Red or blue?"}
elif stage == "implement":
    Path(f"{task}.txt").write_text(f"done by {os.getpid()}\n")
    ident = ["-c", "user.name=Fake", "-c", "user.email=fake@example.com"]
    subprocess.run(["git", "add", "-A"], check=True)
    subprocess.run(
        ["git", *ident, "commit", "-qm", os.environ.get("FAKE_SUBJECT", f"implement {task}")],
        check=True,
    )
elif stage == "review":
    answer = {"approved": not os.environ.get("FAKE_REJECT"), "issues": ["not good"]}

events = [
    {"type": "system", "subtype": "init", "session_id": "s", "model": "m"},
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "num_turns": 1,
        "total_cost_usd": 0.01,
        "result": json.dumps(answer),
        "structured_output": answer,
        "session_id": "s",
    },
]
for event in events:
    print(json.dumps(event), flush=True)
