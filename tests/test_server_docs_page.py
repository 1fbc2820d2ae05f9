"""The interactive API docs (``/docs``, Swagger UI) work with no internet: the service
serves their script, styles and icon itself, from an installed package, instead of
linking a CDN that an offline laptop or a locked-down network cannot reach."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from fastapi.testclient import TestClient

from amelio.server import create_app
from amelio.testing import ThreadedServer
from amelio.workspace.folder import Workspace
from browser_support import launch_chromium


@pytest.fixture
def client(sqlite_workspace: Workspace) -> Iterator[TestClient]:
    with TestClient(create_app(sqlite_workspace)) as c:
        yield c


def asset_urls(html: str) -> list[str]:
    """Every URL the page loads by itself: scripts, styles, icons (not links to follow)."""
    found = re.findall(r"""<(?:script|link|img)\b[^>]*?\b(?:src|href)=["']([^"']+)["']""", html)
    found += re.findall(r"""\burl:\s*["']([^"']+)["']""", html)  # Swagger UI's spec URL
    return found


def test_every_asset_of_the_docs_page_is_served_by_the_service(client: TestClient) -> None:
    page = "/docs"
    response = client.get(page)
    assert response.status_code == 200
    urls = asset_urls(response.text)
    assert any(u.endswith(".js") for u in urls), urls  # the page has its script
    assert "/openapi.json" in urls
    for url in urls:
        absolute = urljoin(f"http://testserver{page}", url)
        assert urlsplit(absolute).netloc == "testserver", f"{page} loads {url} from elsewhere"
        asset = client.get(absolute)
        assert asset.status_code == 200, url
        assert asset.content, url


@pytest.mark.slow
def test_the_docs_render_every_operation_with_no_network_but_loopback(
    sqlite_workspace: Workspace, chromium: str
) -> None:
    """Chromium with every request beyond loopback aborted, as on a laptop offline:
    Swagger UI draws one block per operation of the OpenAPI document."""
    operation = ".opblock"
    app = create_app(sqlite_workspace)
    operations = sum(
        1
        for methods in app.openapi()["paths"].values()
        for method in methods
        if method in {"get", "post", "put", "delete", "patch"}
    )
    with ThreadedServer(app) as server, launch_chromium(chromium) as browser:
        ctx = browser.new_context()
        ctx.set_default_timeout(20_000)
        blocked: list[str] = []

        def only_loopback(route: object) -> None:
            url = route.request.url  # type: ignore[attr-defined]
            host = urlsplit(url).hostname or ""
            if url.startswith(("data:", "blob:")) or host in {"127.0.0.1", "localhost", "::1"}:
                route.continue_()  # type: ignore[attr-defined]
            else:
                blocked.append(url)
                route.abort()  # type: ignore[attr-defined]

        ctx.route("**/*", only_loopback)
        browser_page = ctx.new_page()
        browser_page.goto(server.url + "/docs")
        browser_page.wait_for_selector(operation)
        browser_page.wait_for_function(
            f"document.querySelectorAll({operation!r}).length >= {operations}"
        )
        assert browser_page.locator(operation).count() == operations
        assert blocked == []
        ctx.close()


def test_no_redoc_page_is_served_or_mentioned(client: TestClient) -> None:
    """ReDoc's script fetches its maker's logo from the internet: no such page, then,
    and no document sends a reader to one."""
    assert client.get("/redoc").status_code == 404
    root = Path(__file__).resolve().parent.parent
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        assert "/redoc" not in doc.read_text(encoding="utf-8"), doc.name
