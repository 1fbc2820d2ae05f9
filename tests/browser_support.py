"""What the browser tests share (test_client_js, test_client_compute, test_embed_worker;
test_dashboard and test_demo_page launch Chromium through it too): Debian's Chromium
launched by Playwright, a workspace opened with the test's settings, and polling until a
condition holds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from amelio.workspace.config import load_settings
from amelio.workspace.folder import Workspace, init_workspace, open_workspace

#: Headless Chromium quiet: no sandbox (containers), no GPU, and nothing of its own on
#: the network (the tests' loopback guard would refuse it anyway).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def launch_chromium(executable: str) -> Iterator[Any]:
    """A Playwright browser running ``executable`` (the ``chromium`` fixture's path)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def workspace_with(path: Path, **settings: Any) -> Workspace:
    """A new workspace at ``path``, opened with ``settings`` over its amelio.toml."""
    ws, _ = init_workspace(path)
    ws.dispose()
    return open_workspace(path, settings=load_settings(path, **settings))


def wait_for(check: Callable[[], Any], timeout: float = 15.0, *, page: Any = None) -> Any:
    """``check()`` once truthy, or its last value after ``timeout`` seconds. With a
    ``page``, the wait runs in Playwright, which then delivers the browser's events
    (requests seen) to this thread: the sync API delivers them only during its calls."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        if page is not None:
            page.wait_for_timeout(50)
        else:
            time.sleep(0.05)
