"""The dashboard in a real browser (Debian's Chromium driven by Playwright), over real HTTP."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import count
from pathlib import Path
from typing import Any

import httpx
import pytest

from amelio import knowledge, skills
from amelio.demo.app import load_demo_corpus, load_recorded_interactions
from amelio.improve.nightly import run_improve
from amelio.server import create_app
from amelio.testing import FakeLLMServer, FakeRequest, ThreadedServer
from amelio.web.session import COOKIE, dump_session
from amelio.workspace import keys
from amelio.workspace.folder import init_workspace, open_workspace
from browser_support import launch_chromium

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "docs" / "screenshots"


def brain(request: FakeRequest) -> str:
    """Answers like each role: the scenario writer, the judge, the assistant."""
    if "realistic test messages" in request.system:
        count = int(re.search(r"Write (\d+)", request.prompt).group(1))  # type: ignore[union-attr]
        asked = ["git push rejected after a rebase", "how do I undo a push"]
        return json.dumps([*asked, *(f"git push rejected, case {i}" for i in range(count))][:count])
    if "and one answer" in request.system:  # the judge alone, against people's votes
        return json.dumps({"score": 9 if "lease" in request.prompt else 3, "reason": "r"})
    if "judge" in request.system:
        a, b = request.prompt.split("ANSWER A:\n", 1)[1].split("\n\nANSWER B:\n", 1)
        return json.dumps(
            {
                "score_a": 9 if "lease" in a else 3,
                "score_b": 9 if "lease" in b else 3,
                "reason": "the answer with --force-with-lease is safe",
            }
        )
    if "knowledge notebook" in request.system:
        return "Open the self-service portal and choose Reset. [1]"
    if "amelio:improvements" in request.system:
        return "Run `git pull --rebase`, then git push --force-with-lease."
    return "Run git push --force."


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("dash")
    llm = FakeLLMServer(default=brain).start()
    env = {
        "AMELIO_LLM_PROVIDER": "openai",
        "AMELIO_LLM_BASE_URL": llm.openai_base_url,
        "AMELIO_LLM_MODEL": "fake",
        "AMELIO_LLM_MAX_RETRIES": "0",
        # The browser's Accept-Language picks the language (each context sets its locale);
        # no sync worker, so the knowledge test decides when the queue is drained.
        "AMELIO_UI_LANGUAGE": "auto",
        "AMELIO_KNOWLEDGE_WORKER": "false",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    ws, _ = init_workspace(root / "ws")
    for skill in (ROOT / "examples" / "skills").iterdir():
        shutil.copytree(skill, ws.skills_dir / skill.name)
    skills.import_skills(ws.engine, ws.skills_dir)
    load_recorded_interactions(ws)
    load_demo_corpus(ws)
    run_improve(ws, notify=False)
    ws.dispose()
    ws = open_workspace(root / "ws")
    tokens = {
        role: keys.create_key(ws.engine, name=f"{role}-user", role=role)[1]
        for role in ("admin", "bot")
    }
    with ThreadedServer(create_app(ws)) as server:
        yield {"base": server.url, "tokens": tokens, "ws": ws}
    ws.dispose()
    llm.stop()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def page(site: dict[str, Any], chromium: str) -> Iterator[Any]:
    with launch_chromium(chromium) as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
        page = context.new_page()
        page.set_default_timeout(15_000)
        yield page


def login(page: Any, site: dict[str, Any], role: str) -> None:
    page.goto(f"{site['base']}/skills")
    assert "/login" in page.url
    page.get_by_label("API key").fill(site["tokens"][role])
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r".*/skills.*"))


def shot(page: Any, name: str, tmp_path: Path) -> None:
    page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
    if os.environ.get("UPDATE_SCREENSHOTS"):
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@pytest.mark.slow
def test_review_cycle_in_the_browser(page: Any, site: dict[str, Any], tmp_path: Path) -> None:
    login(page, site, "admin")
    explorer = page.locator(".skill-list")
    assert explorer.get_by_text("git-help").count() == 1
    row = page.locator(".skill-list li", has_text="git-help")
    assert row.locator(".badge.warn").count() == 1  # underperforming
    assert row.locator(".badge.info").count() == 1  # pending proposal
    shot(page, "skills", tmp_path)

    row.locator("a").click()
    page.wait_for_url(re.compile(r".*/skills/git-help.*"))
    assert page.locator("article.markdown h1").count() >= 1
    page.get_by_role("link", name="Evals").click()
    assert "gh-001" in page.locator("table").inner_text()
    page.get_by_role("link", name="Evolution").click()
    assert "v1" in page.locator(".timeline").inner_text()

    page.get_by_role("link", name="PRs").click()
    proposal = page.locator("article.proposal").first
    proposal.get_by_role("button", name="Run benchmark").click()
    assert "Benchmark started." in page.locator(".flash").inner_text()
    for _ in range(60):  # the benchmark runs in the background; the page shows it when done
        page.reload()
        proposal = page.locator("article.proposal").first
        if proposal.get_by_test_id("benchmark-badge").count():
            break
        page.wait_for_timeout(250)
    assert "PASSED" in proposal.get_by_test_id("benchmark-badge").inner_text()
    proposal.locator("details[data-lazy] summary").click()
    report = proposal.get_by_test_id("benchmark-report")
    report.wait_for()
    assert "wins" in report.inner_text() and "★" in report.inner_text()
    assert "--force-with-lease is safe" in report.inner_text()
    # The template proposal was written from the failed answers: none is replayed.
    assert "the proposal was not written from;" in report.get_by_test_id("held-out").inner_text()
    shot(page, "battle", tmp_path)

    proposal.get_by_role("button", name="Approve").click()
    assert "→ v2" in page.locator(".flash").inner_text()
    folder = site["ws"].skills_dir / "git-help"
    assert (folder / "SKILL.v1.md").is_file()
    assert "amelio:improvements" in (folder / "SKILL.md").read_text()
    page.get_by_role("link", name="Content", exact=True).click()
    assert page.locator("#version option").count() == 2

    for path, name in (
        ("/quality", "quality"),
        ("/learnings", "learnings"),
        ("/interactions", "interactions"),
        ("/search", "search"),
    ):
        page.goto(site["base"] + path)
        assert page.locator("h1").count() == 1
        if name == "search":
            page.get_by_label("Query").fill("undo the last commit")
            page.get_by_role("button", name="Search").click()
            # The form submits a new page: wait for its rows rather than count the old.
            page.locator("table.search-results tbody tr").nth(9).wait_for()
            assert page.locator("table.search-results tbody tr").count() == 10
        shot(page, name, tmp_path)
    page.goto(site["base"] + "/quality")
    assert page.locator("tr.underperforming").count() >= 1
    assert page.locator("svg.chart").count() >= 1
    page.set_viewport_size({"width": 390, "height": 844})  # a phone
    page.goto(site["base"] + "/skills/git-help?tab=prs")
    assert page.locator("article.proposal").first.is_visible()


def test_non_admin_sees_no_controls_and_forged_posts_fail(page: Any, site: dict[str, Any]) -> None:
    login(page, site, "bot")
    page.goto(f"{site['base']}/skills/deployment?tab=prs")
    assert page.locator("article.proposal").count() >= 1
    assert page.get_by_role("button", name="Approve").count() == 0
    assert page.get_by_role("button", name="Sage analyze").count() == 0
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    pending = httpx.get(
        f"{site['base']}/v1/proposals?status=pending",
        headers={"Authorization": f"Bearer {site['tokens']['bot']}"},
    ).json()["proposals"]
    pid = pending[0]["id"]
    # A bot session: refused even with its own valid CSRF token.
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    r = httpx.post(f"{site['base']}/proposals/{pid}/approve", cookies=cookies, data={"csrf": csrf})
    assert r.status_code == 403
    # An admin session without the form's CSRF token (a forged cross-site POST).
    ws = site["ws"]
    admin_key = next(k for k in keys.list_keys(ws.engine) if k.role == "admin")
    forged = {
        COOKIE: dump_session(ws.settings, key_id=admin_key.id, role="admin", name=admin_key.name)
    }
    r = httpx.post(f"{site['base']}/proposals/{pid}/approve", cookies=forged, data={"csrf": "x"})
    assert r.status_code == 403
    # A cookie signed with another key is no session at all.
    r = httpx.get(
        f"{site['base']}/skills", cookies={COOKIE: "e30.deadbeef"}, follow_redirects=False
    )
    assert r.status_code == 303 and "/login" in r.headers["location"]
    assert (
        httpx.get(
            f"{site['base']}/v1/proposals/{pid}",
            headers={"Authorization": f"Bearer {site['tokens']['bot']}"},
        ).json()["status"]
        == "pending"
    )


def _broken_indexer(source: knowledge.Source) -> Any:
    raise OSError("disk full")


def _dead_letter(ws: Any, source: knowledge.Source) -> None:
    """Queue ``source`` in notebook ``support`` and fail every try of it: the library's
    drain, with an indexer that always raises and a clock stepping past each backoff,
    moves it to the dead letters."""
    knowledge.enqueue(ws, "support", [source])
    start, step = datetime.now(UTC), count()
    report = knowledge.drain(
        ws, indexer=_broken_indexer, clock=lambda: start + timedelta(seconds=10 * next(step))
    )
    assert report.dead == [source.source_id]


def _as(page: Any, locale: str, cookies: list[Any]) -> Any:
    """A new page in a browser context with ``locale`` (its Accept-Language) and the
    session ``cookies``."""
    context = page.context.browser.new_context(
        viewport={"width": 1280, "height": 900}, locale=locale
    )
    context.add_cookies(cookies)
    other = context.new_page()
    other.set_default_timeout(15_000)
    return other


@pytest.mark.slow
def test_knowledge_page_in_the_browser(page: Any, site: dict[str, Any], tmp_path: Path) -> None:
    ws = site["ws"]
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "vpn.md").write_text(
        "# VPN password reset\n\nTo reset the VPN password, open the "
        "self-service portal and choose Reset.\n",
        encoding="utf-8",
    )
    knowledge.create_notebook(ws, "support")
    knowledge.sync_folder(ws, raw, "support")
    assert knowledge.drain(ws).indexed == ["vpn.md"]
    t0 = datetime(2026, 5, 1, 10, tzinfo=UTC)
    _dead_letter(
        ws,
        knowledge.Source(
            "T-1042",
            "Refunds are paid back within five days.",
            t0,
            kind="ticket",
            title="Refund delay",
        ),
    )

    login(page, site, "admin")
    page.get_by_role("link", name="Knowledge").click()
    page.wait_for_url(re.compile(r".*/knowledge\?project=default"))
    row = page.locator("tr[data-notebook=support]")
    health = {
        cell: row.locator(f"td.{cell}").inner_text()
        for cell in ("sources", "chunks", "pending", "dead", "last-sync")
    }
    assert (health["sources"], health["chunks"], health["pending"], health["dead"]) == (
        "1",
        "1",
        "0",
        "1",
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", health["last-sync"])
    row.get_by_role("link", name="support").click()
    page.wait_for_url(re.compile(r".*/knowledge/support\?.*"))
    assert "vpn.md" in page.locator("table.sources").inner_text()
    page.get_by_label("Question").fill("How do I reset my VPN password?")
    page.get_by_role("button", name="Ask").click()
    page.get_by_test_id("knowledge-answer").wait_for()
    answer = page.get_by_test_id("knowledge-answer").inner_text()
    assert "choose Reset. [1]" in answer and "generated" in answer
    citation = page.get_by_test_id("citation").first.inner_text()
    assert "[1]" in citation and "VPN password reset" in citation and "vpn.md" in citation
    assert "self-service portal" in citation and "cited" in citation
    dead = page.locator("table.dead-letters")
    assert "T-1042" in dead.inner_text() and "OSError: disk full" in dead.inner_text()
    assert dead.get_by_role("button", name="Retry").count() == 1
    shot(page, "knowledge", tmp_path)

    viewer = _as(page, "en-US", [])
    login(viewer, site, "bot")
    bot_cookies = viewer.context.cookies()
    viewer.goto(f"{site['base']}/knowledge/support")
    assert "OSError: disk full" in viewer.locator("table.dead-letters").inner_text()
    assert viewer.get_by_role("button", name="Retry").count() == 0
    viewer.context.close()

    dead.get_by_role("button", name="Retry").click()
    assert "is back in the queue" in page.locator(".flash").inner_text()
    shown = page.get_by_test_id("notebook-health")
    assert (shown.locator("dd.pending").inner_text(), shown.locator("dd.dead").inner_text()) == (
        "1",
        "0",
    )
    assert page.locator("table.dead-letters").count() == 0
    assert knowledge.failures(ws, notebook="support") == []
    assert knowledge.drain(ws).indexed == ["T-1042"]  # the retried job indexes now

    # In French: the same page, its health, a question, and Retry for the admin only.
    _dead_letter(
        ws,
        knowledge.Source(
            "T-2001",
            "Les factures partent le premier du mois.",
            t0,
            kind="ticket",
            title="Factures",
        ),
    )
    fr = _as(page, "fr-FR", page.context.cookies())
    fr.goto(f"{site['base']}/skills")
    fr.get_by_role("link", name="Connaissances").click()
    fr.wait_for_url(re.compile(r".*/knowledge\?project=default"))
    assert "Lettres mortes" in fr.locator("table.notebooks thead").inner_text()
    row = fr.locator("tr[data-notebook=support]")
    assert (row.locator("td.sources").inner_text(), row.locator("td.dead").inner_text()) == (
        "2",
        "1",
    )
    row.get_by_role("link", name="support").click()
    fr.get_by_label("Question").fill("mot de passe VPN")
    fr.get_by_role("button", name="Demander").click()
    fr.get_by_test_id("knowledge-answer").wait_for()
    assert "générée" in fr.get_by_test_id("knowledge-answer").inner_text()
    assert "vpn.md" in fr.get_by_test_id("citation").first.inner_text()
    assert "citée" in fr.get_by_test_id("citation").first.inner_text()
    french_viewer = _as(page, "fr-FR", bot_cookies)
    french_viewer.goto(f"{site['base']}/knowledge/support")
    assert "Factures" in french_viewer.locator("table.dead-letters").inner_text()
    assert french_viewer.get_by_role("button", name="Réessayer").count() == 0
    french_viewer.context.close()
    fr.get_by_role("button", name="Réessayer").click()
    assert "est de retour dans la file" in fr.locator(".flash").inner_text()
    assert fr.get_by_text("Aucune lettre morte.").count() == 1
    fr.context.close()


def test_language_choice() -> None:
    from amelio.web.i18n import pick_language, strings

    assert pick_language("auto", "fr-FR,fr;q=0.9,en;q=0.8") == "fr"
    assert pick_language("auto", "de-DE,en;q=0.5") == "en"
    assert pick_language("en", "fr-FR") == "en"
    assert strings("fr")["login"] == "Se connecter"
    assert set(strings("fr")) == set(strings("en"))  # nothing untranslated falls through
