"""A budget every agent obeys, held at the egress proxy, through the real CLI and engine: a
plain program that calls the (fake) Anthropic API in a loop is stopped by `--max-cost` with
reason `budget`, and the cost recorded is the proxy's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fks_testing.fakeapi import FakeAnthropic
from fks_testing.helpers import Result, fks
from fks_testing.sandboxed import add_script, configure, record, sandbox

pytestmark = pytest.mark.docker

CALLER = """#!/bin/sh
body='{"model":"claude-sonnet-4-5","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}'
i=0
while [ $i -lt 20 ]; do
  i=$((i + 1))
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "x-api-key: $ANTHROPIC_API_KEY" \\
    -H 'content-type: application/json' -d "$body" "$ANTHROPIC_BASE_URL/v1/messages")
  echo "call $i: $code"
  # Refused: a program that ignores it keeps trying; fks ends the iteration.
  [ "$code" = 200 ] || sleep 1
done
"""
# claude-sonnet: $3 and $15 per million tokens: $0.45 a call.
USAGE = {"input_tokens": 100_000, "output_tokens": 10_000}


def _calls_under_a_budget(repo: Path, caller: str, delay: float = 0) -> tuple[Result, int]:
    """`caller` run as a sandboxed step with `--max-cost 1` against the fake Anthropic API
    (each answer $0.45, `delay` seconds late): fks's result and the calls the API answered."""

    def answer(request: Any) -> dict[str, Any]:
        return {"blocks": [{"text": "hello"}], "usage": USAGE, "delay": delay}

    with FakeAnthropic(host="0.0.0.0", responder=answer, is_side=lambda _: False) as api:
        add_script(repo, "caller.sh", caller)
        configure(repo, {"sandbox": {"modelApis": ["anthropic"]}})
        env = {
            "ANTHROPIC_API_KEY": "sk-ant-REAL-meter-test",
            "ANTHROPIC_BASE_URL": f"http://host.docker.internal:{api.port}",
        }
        result = sandbox("./scripts/caller.sh:1", "--max-cost", "1", env=env)
        return result, len(api.main_requests())


def test_a_plain_program_calling_the_api_is_stopped_by_max_cost(repo: Path) -> None:
    result, calls = _calls_under_a_budget(repo, CALLER)
    assert result.code == 1, result.output
    assert calls == 3, result.output  # $1.35 spent: the fourth call is refused
    assert "spent $1.35 of --max-cost $1" in result.output, result.output
    run = record(repo)
    iteration = run["steps"][0]["iterations"][0]
    assert iteration["reason"] == "budget", iteration
    assert iteration["claude"]["cost_usd"] == pytest.approx(1.35, abs=0.01)  # the proxy's figure
    shown = fks("show", run["id"])
    assert "budget" in shown.output


def test_a_request_body_the_meter_cannot_decode_is_still_counted(repo: Path) -> None:
    """The agent writes the request's headers: a `Content-Encoding` nothing can decode (an API
    that ignores it still answers, and bills) does not keep its calls out of the spend."""

    caller = CALLER.replace("-H 'content-type", "-H 'content-encoding: x-fks' -H 'content-type")
    result, calls = _calls_under_a_budget(repo, caller)
    assert calls == 3, result.output  # $1.35 spent: the fourth call is refused
    assert "spent $1.35 of --max-cost $1" in result.output, result.output


# Ten calls, one after another on one kept-alive connection (curl reuses it for each URL).
KEEP_ALIVE_CALLER = """#!/bin/sh
body='{"model":"claude-sonnet-4-5","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}'
url="$ANTHROPIC_BASE_URL/v1/messages"
set --
for i in 1 2 3 4 5 6 7 8 9 10; do set -- "$@" "$url" -o /dev/null; done
curl -s -w 'call: %{http_code} %{num_connects}\\n' -H "x-api-key: $ANTHROPIC_API_KEY" \\
  -H 'content-type: application/json' -d "$body" "$@"
sleep 30
"""


def test_calls_on_one_kept_alive_connection_stop_at_the_budget(repo: Path) -> None:
    """Each response's sum is made after its end has gone to the agent: the next call on the
    same connection, sent at once, still finds it made and is refused."""

    result, calls = _calls_under_a_budget(repo, KEEP_ALIVE_CALLER)
    assert calls == 3, result.output  # the fourth call, on the same connection, refused
    assert "spent $1.35 of --max-cost $1" in result.output, result.output


# Eight calls at once: each is checked against the budget before any of them has answered.
CONCURRENT_CALLER = """#!/bin/sh
body='{"model":"claude-sonnet-4-5","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}'
for i in 1 2 3 4 5 6 7 8; do
  curl -s -o /dev/null -w "call $i: %{http_code}\\n" -H "x-api-key: $ANTHROPIC_API_KEY" \\
    -H 'content-type: application/json' -d "$body" "$ANTHROPIC_BASE_URL/v1/messages" &
done
wait
sleep 30
"""


def test_calls_made_at_once_spend_no_more_than_one_turn_past_the_budget(repo: Path) -> None:
    """`--max-cost` is never exceeded by more than one model turn (docs/claude.md): eight calls
    sent at once, each answering a second later, with a budget of a bit over two."""

    result, calls = _calls_under_a_budget(repo, CONCURRENT_CALLER, delay=1)
    assert calls <= 3, result.output  # $1.35: at most one turn past $1
