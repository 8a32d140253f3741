"""Fixtures of the web tests: one Debian chromium per test module (Playwright), and a watched
page per test whose screenshots are kept under the test's name."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import TYPE_CHECKING

import pytest
from fks_testing.browser import UiServer, Watched, chromium, watched_page

if TYPE_CHECKING:
    from playwright.sync_api import Browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def open_page(
    browser: Browser, request: pytest.FixtureRequest
) -> Iterator[Callable[[UiServer], Watched]]:
    """Opens `fks ui`'s printed URL in a fresh browser context; closed after the test."""
    with ExitStack() as stack:

        def opening(server: UiServer) -> Watched:
            return stack.enter_context(watched_page(browser, server, request.node.name))

        yield opening
