"""Transient Docker API errors are retried with back-off; real errors are not."""

from __future__ import annotations

import docker.errors
import pytest
import requests

from sandbox_runner.backends.docker.engine.client import with_retries


class Flaky:
    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def api_error(status: int, message: str = "boom") -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError(message, response=response, explanation=message)


def test_server_errors_and_connection_drops_are_retried() -> None:
    flaky = Flaky(api_error(500), requests.exceptions.ConnectionError("reset"), api_error(503))
    assert with_retries("create", flaky) == "ok"
    assert flaky.calls == 4


@pytest.mark.parametrize(
    "error",
    [
        api_error(400, "bad parameter"),
        api_error(
            500, 'OCI runtime create failed: exec: "nope": executable file not found in $PATH'
        ),
        docker.errors.NotFound("no such container"),
    ],
)
def test_request_errors_are_not_retried(error: BaseException) -> None:
    flaky = Flaky(error)
    with pytest.raises(type(error)):
        with_retries("start", flaky)
    assert flaky.calls == 1
