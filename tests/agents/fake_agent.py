#!/usr/bin/env python3
"""A small agent for tests: records how it was called, prints the marker on the k-th iteration.

Behaviour comes from environment variables (all optional):
  FAKE_STATE       directory for the iteration counter and calls.jsonl (default: cwd/.fake)
  FAKE_MARKER_AT   iteration on which to print FORKHESTRA_COMPLETE (default 1; 0 = never)
  FAKE_MARKER_HOW  "line" (default), "stderr", "sentence", "indented", "nonewline"
  FAKE_EXIT        exit code (default 0); FAKE_EXIT_UNTIL=k exits FAKE_EXIT only before iteration k
  FAKE_SLEEP       seconds to sleep before exiting
  FAKE_CHILD       if set, start a background grandchild that sleeps (writes its pid to child.pid)
  FAKE_STDERR      text to print on stderr
  FAKE_TOUCH       if set, write iteration-<n>.txt into the cwd (counts as progress)
  FAKE_WRITE_PROMPT  path of a prompt file to rewrite as "prompt v<n+1>" (prompt files are re-read)
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

state = Path(os.environ.get("FAKE_STATE") or Path.cwd() / ".fake")
state.mkdir(parents=True, exist_ok=True)
counter = state / "count"
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
args = sys.argv[1:]
with (state / "calls.jsonl").open("a") as calls:
    calls.write(
        json.dumps(
            {
                "iteration": n,
                "argv": sys.argv,
                "args": args,
                "cwd": str(Path.cwd()),
                "prompt": args[-1] if args else None,
            }
        )
        + "\n"
    )

print(f"fake agent iteration {n}", flush=True)
if os.environ.get("FAKE_STDERR"):
    print(os.environ["FAKE_STDERR"], file=sys.stderr, flush=True)
if os.environ.get("FAKE_TOUCH"):
    Path(f"iteration-{n}.txt").write_text(str(n))
if os.environ.get("FAKE_WRITE_PROMPT"):
    Path(os.environ["FAKE_WRITE_PROMPT"]).write_text(f"prompt v{n + 1}")
if os.environ.get("FAKE_CHILD"):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    (state / "child.pid").write_text(str(child.pid))
(state / "pid").write_text(str(os.getpid()))

marker_at = int(os.environ.get("FAKE_MARKER_AT", "1"))
if marker_at and n >= marker_at:
    how = os.environ.get("FAKE_MARKER_HOW", "line")
    if how == "stderr":
        print("FORKHESTRA_COMPLETE", file=sys.stderr)
    elif how == "sentence":
        print("I am not done, FORKHESTRA_COMPLETE is what I will say later")
    elif how == "indented":
        print("   FORKHESTRA_COMPLETE  ")
    elif how == "nonewline":
        sys.stdout.write("FORKHESTRA_COMPLETE")
    else:
        print("FORKHESTRA_COMPLETE")
    sys.stdout.flush()

if os.environ.get("FAKE_SLEEP"):
    time.sleep(float(os.environ["FAKE_SLEEP"]))
until = int(os.environ.get("FAKE_EXIT_UNTIL", "0"))
code = int(os.environ.get("FAKE_EXIT", "0"))
sys.exit(code if (not until or n < until) else 0)
