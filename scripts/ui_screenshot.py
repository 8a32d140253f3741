"""Make docs/ui.png, the README's picture of `fks ui`, from real runs: a sandboxed agent that
commits a file each iteration runs twice in a scratch repository, then `fks ui` shows the
newest run in Debian's chromium. Needs Docker with the fks images, and the ui extra.

    .venv/bin/python scripts/ui_screenshot.py [--out docs/ui.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from fks_testing.browser import chromium, serve
from fks_testing.helpers import fks, init_repo
from fks_testing.sandboxed import COMMIT_AGENT, add_script, configure

ROOT = Path(__file__).resolve().parents[1]


def make_runs(repo: Path, env: dict[str, str]) -> None:
    init_repo(repo, {"README.md": "hello\n"})
    add_script(repo, "commit.sh", COMMIT_AGENT)
    configure(repo, {})
    for dsl, mark in (("./scripts/commit.sh:1", "1"), ("./scripts/commit.sh:3", "3")):
        done = fks("run", dsl, "--sandbox", cwd=repo, env={**env, "MARK_AT": mark}, timeout=600)
        if done.code != 0:
            raise SystemExit(f"ui_screenshot: fks run {dsl} --sandbox failed:\n{done.output}")


def shoot(repo: Path, env: dict[str, str], out: Path) -> None:
    with serve(repo, env=env) as server, chromium() as browser:
        context = browser.new_context(viewport={"width": 1100, "height": 760})
        page = context.new_page()
        page.goto(server.url)
        page.wait_for_url(f"{server.origin}/")  # the page with the token goes on without it
        runs = page.locator("a[href*='/runs/']")
        if runs.count():
            runs.first.click()
            page.wait_for_load_state()
        page.screenshot(path=str(out))
        context.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui.png")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fks-ui-shot-") as scratch:
        env = {"XDG_STATE_HOME": str(Path(scratch) / "state")}
        repo = Path(scratch) / "project"
        make_runs(repo, env)
        shoot(repo, env, args.out)
    print(f"ui_screenshot: {args.out} ({args.out.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
