"""Idle compute against one party posing as several clients: what an outside review
reproduced with one client key (two identities "agreeing" on forged vectors, a pair
holding every open task, ``computeMs: 0``), each over HTTP against a real workspace,
real documents and the real wordllama embedder; and the trust rules that stop it."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from amelio.contributions import TRUST_FLOOR, policy
from amelio.contributions.trust import Contributor, network_id, network_of, related
from amelio.contributions.verdicts import PROBATION_SAMPLE
from amelio.db.schema import contribution_clients as clients
from amelio.embeddings import Embedder, load_embedder
from amelio.privacy.signing import Signer
from amelio.search.documents import Document
from amelio.workspace.folder import Workspace
from test_contributions import DEFENCES, MODEL, corpus, cosine, open_site

pytest.importorskip("wordllama")


@pytest.fixture(scope="module")
def wordllama() -> Embedder:
    return load_embedder(MODEL)


def forged(task: dict[str, Any]) -> list[list[float]]:
    """One unit vector for every text: stored, it made every document score 1.0 for an
    unrelated query."""
    vector = [0.0] * task["dimensions"]
    vector[0] = 1.0
    return [vector] * len(task["input"]["texts"])


#: Two identities of one party: addresses they were minted from (with one client key,
#: at the same moment).
PAIRS = {
    "one IPv4 /24": ("203.0.113.10", "203.0.113.200"),
    "one IPv6 /48": ("2001:db8:5:1::1", "2001:db8:5:ff::9"),
    "one key at once": ("203.0.113.10", "192.0.2.10"),
}


@pytest.mark.parametrize("probation", ["default", "off"])
@pytest.mark.parametrize("pair", PAIRS.values(), ids=list(PAIRS))
def test_two_identities_of_one_party_get_no_forged_vector_accepted(
    sqlite_workspace: Workspace, wordllama: Embedder, pair: tuple[str, str], probation: str
) -> None:
    """Before, both leased every task, sent the same forged vectors, and every task was
    accepted. Now they are related (never verify each other, never hold one task), and
    with probation on, the server checks a new identity's results itself anyway."""
    off = {"contributions_probation": 0} if probation == "off" else {}
    with open_site(sqlite_workspace, wordllama, docs=12, **DEFENCES | off) as site:
        a, b = site.browser("HIGH", pair[0]), site.browser("HIGH", pair[1])
        verdicts = []
        for _ in range(3):  # each leases all it can and forges every task
            for forger in (a, b):
                for task in forger.tasks(8):
                    verdicts.append(forger.verdict(task, forged(task))["status"])
        assert verdicts and "accepted" not in verdicts
        assert site.vectors() == {}
        assert site.stats()["tasks"]["accepted"] == 0

        # A browser of another network, minted later, gets the work, and the truth wins
        # (checked by the server while it is on probation, else against the forgeries).
        site.clock.now += DEFENCES["contributions_related_seconds"] + 1
        honest = site.browser("HIGH", "198.18.0.1")
        done = [honest.verdict(task)["status"] for task in honest.tasks(8)]
        assert len(done) == 4 and set(done) <= {"accepted", "pending"}
        assert done.count("accepted") >= 3
        stored = site.vectors()
        truth = site.embedder.inner.embed([f"{d.title}\n{d.body}" for d in corpus(12)])
        assert len(stored) == 3 * done.count("accepted")
        assert min(cosine(stored[d], truth[int(d[4:])]) for d in stored) >= 0.9999
        assert site.stats()["results"]["rejected"] == len(verdicts)  # every forgery


def test_identities_found_related_after_leasing_do_not_vouch_for_each_other(
    sqlite_workspace: Workspace, wordllama: Embedder
) -> None:
    """Two identities that hold one task (leased before they were known to be related,
    as two concurrent leases may) and agree: the server checks, and both lose."""
    with open_site(sqlite_workspace, wordllama, docs=3) as site:
        a, b = site.browser(address="203.0.113.10"), site.browser(address="192.0.2.10")
        [task], [same] = a.tasks(), b.tasks()
        assert task["taskId"] == same["taskId"]
        site.service.settings = site.service.settings.model_copy(
            update={"contributions_related_seconds": 120}  # minted together: one party
        )
        assert a.verdict(task, forged(task))["status"] == "pending"
        caught = b.verdict(same, forged(same))
        assert caught["status"] == "rejected" and caught["trust"] < TRUST_FLOOR
        assert site.vectors() == {} and site.embedder.texts == 3
        assert a.lease()["trust"] < TRUST_FLOOR


def test_a_pair_cannot_hold_every_open_task(workspace: Workspace, wordllama: Embedder) -> None:
    """Before, two identities of one network each leased every open task (two clients a
    task), so an honest browser got none until their leases ran out."""
    with open_site(
        workspace, wordllama, docs=6, contributions_lease_seconds=600, **DEFENCES
    ) as site:
        a, b = site.browser("HIGH", "203.0.113.10"), site.browser("HIGH", "203.0.113.11")
        held = {t["taskId"] for t in a.tasks(8)} | {t["taskId"] for t in b.tasks(8)}
        assert len(held) == 2  # every open task
        site.clock.now += DEFENCES["contributions_related_seconds"] + 1  # a later visitor
        honest = site.browser("HIGH", "198.18.0.1")
        assert {t["taskId"] for t in honest.tasks(8)} == held


def test_one_identity_and_one_network_hold_a_bounded_share_of_the_queue(
    sqlite_workspace: Workspace, wordllama: Embedder
) -> None:
    """Before, a client could lease again and again and hold any number of tasks."""
    with open_site(sqlite_workspace, wordllama, docs=60, contributions_network_tasks=12) as site:
        greedy = site.browser("HIGH", "203.0.113.10")
        held = [t["taskId"] for _ in range(3) for t in greedy.tasks(8)]  # 4 a lease at 0.5
        assert len(held) == len(set(held)) == 8  # the most one client holds at once
        refused = greedy.lease(8)
        assert refused["tasks"] == [] and "holds 8" in refused["reason"]
        assert refused["retryAfterMs"] > 0
        assert len(site.browser("HIGH", "203.0.113.11").tasks(8)) == 4  # the network's 12
        crowded = site.browser("HIGH", "203.0.113.12").lease(8)
        assert crowded["tasks"] == [] and "network" in crowded["reason"]
        assert len(site.browser("HIGH", "198.18.0.1").tasks(8)) == 4  # another network
        site.clock.now += 121  # the greedy client's leases ran out: it may lease again
        assert greedy.tasks(8)


def test_reporting_no_cpu_does_not_spare_the_budget(
    sqlite_workspace: Workspace, wordllama: Embedder
) -> None:
    """Before, the budget counted the ``computeMs`` results reported: a client sending
    0 (and reporting 0 CPU-seconds) was never out of budget. Now each leased task is
    charged the server's estimate of its cost."""
    with open_site(sqlite_workspace, wordllama, docs=0) as site:
        body = "Open Settings, then Security, then follow the steps. " * 36  # ~1,900 chars
        site.store.apply([Document(f"long-{i}", f"Guide {i}", body, {}) for i in range(6)])
        liar = site.browser("LOW")
        first = liar.lease(1, cpuSecondsLastHour=0)
        assert first["budget"]["usedLastHour"] > 0
        [task] = first["tasks"]
        cost = policy.task_cost_ms(MODEL, task["input"]["texts"]) / 1000
        assert first["budget"]["usedLastHour"] == pytest.approx(cost, abs=1e-3)
        assert liar.verdict(task, compute_ms=0)["status"] == "pending"
        second = liar.lease(1, cpuSecondsLastHour=0)
        assert second["budget"]["usedLastHour"] == pytest.approx(2 * cost, abs=1e-3)


def test_a_spent_budget_stops_a_client_that_reports_nothing(
    sqlite_workspace: Workspace, wordllama: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(policy.COSTS, MODEL, policy.TaskCost(per_text_ms=2000, per_char_ms=0))
    with open_site(sqlite_workspace, wordllama, docs=30) as site:  # tasks of 6 s
        liar = site.browser("LOW")  # 15 CPU-seconds an hour: three tasks
        got = 0
        for _ in range(6):
            tasks = liar.lease(4, cpuSecondsLastHour=0)["tasks"]
            for task in tasks:
                assert liar.verdict(task, compute_ms=0)["status"] == "pending"
            got += len(tasks)
        assert got == 3
        spent = liar.lease(1, cpuSecondsLastHour=0)
        assert spent["tasks"] == [] and "budget" in spent["reason"]
        assert spent["budget"]["usedLastHour"] == 18.0


def test_a_new_identity_is_checked_by_the_server_until_it_earned_trust(
    sqlite_workspace: Workspace, wordllama: Embedder
) -> None:
    """Before, a new identity's result waited for a peer's and was believed on the
    peer's word alone."""
    probation = DEFENCES["contributions_probation"]
    with open_site(sqlite_workspace, wordllama, docs=3 * (probation + 2), **DEFENCES) as site:
        newcomer = site.browser()
        for i in range(probation):
            [task] = newcomer.tasks()
            verdict = newcomer.verdict(task)  # accepted at once, by the server's own check
            assert verdict["status"] == "accepted" and "spot-check" in verdict["reason"]
            assert site.embedder.texts == 3 * (i + 1)
        [task] = newcomer.tasks()
        assert newcomer.verdict(task)["status"] == "pending"  # peers may vouch for it now
        assert site.embedder.texts == 3 * probation
        assert len(site.vectors()) == 3 * probation
        assert site.stats()["spotChecks"] == probation

        liar = site.browser()  # a new identity's forgery is caught with no peer at all
        [task] = liar.tasks()
        caught = liar.verdict(task, forged(task))
        assert caught["status"] == "rejected" and caught["trust"] < TRUST_FLOOR
        assert len(site.vectors()) == 3 * probation


def test_a_result_no_independent_client_matches_is_checked_by_the_server(
    sqlite_workspace: Workspace, wordllama: Embedder
) -> None:
    """Where every client that comes is related to the first (one office network), the
    task is not left waiting forever: after a lease's length the server checks it."""
    with open_site(sqlite_workspace, wordllama, docs=3) as site:
        alone = site.browser(address="203.0.113.10")
        [task] = alone.tasks()
        assert alone.verdict(task)["status"] == "pending"
        neighbour = site.browser(address="203.0.113.20")
        assert neighbour.lease()["tasks"] == []  # one network: it may not vouch
        site.clock.now += 120 + 30
        neighbour.lease()
        assert site.vectors() == {}  # another client may still come
        site.clock.now += 31
        neighbour.lease()  # the lease settles the waiting result
        assert sorted(site.vectors()) == ["doc-0", "doc-1", "doc-2"]
        assert site.stats()["spotChecks"] == 1 and site.embedder.texts == 3
        assert alone.lease()["trust"] > 0.5


# -- the rules on their own -------------------------------------------------------------


def test_networks_are_prefixes_kept_as_keyed_digests() -> None:
    assert network_of("203.0.113.77") == "203.0.113.0/24"
    assert network_of("::ffff:203.0.113.9") == "203.0.113.0/24"
    assert network_of("2001:db8:5:ff::9") == "2001:db8:5::/48"
    assert network_of("testclient") == "host:testclient"
    assert network_of(None) == "unknown"
    ours, theirs = Signer(b"secret"), Signer(b"another workspace's secret")
    one = network_id("203.0.113.77", ours)
    assert one == network_id("203.0.113.1", ours) != network_id("203.0.114.1", ours)
    assert one != network_id("203.0.113.77", theirs)
    assert len(one) == 32 and "203" not in one


def test_which_identities_are_related() -> None:
    def who(id_: str, network: str, key: int | None, minted_s: float) -> Contributor:
        return Contributor(id_, 0.5, network, key, int(minted_s * 1000), 0)

    window = 120_000
    a = who("A", "n1", 1, 0)
    assert related(a, a, window)
    assert related(a, who("B", "n1", 2, 9999), window)  # one network
    assert related(a, who("B", "n2", 1, 119), window)  # one key, minted together
    assert not related(a, who("B", "n2", 1, 121), window)  # one key, minutes apart
    assert not related(a, who("B", "n2", 2, 0), window)  # two keys, two networks
    assert not related(a, who("B", "n2", 1, 0), 0)  # the window off
    legacy = who("L", "", None, 0)  # minted before networks were kept
    assert not related(legacy, who("M", "", None, 0), window)


def test_the_server_estimate_of_a_task_grows_with_its_texts() -> None:
    short, long = ["a" * 100] * 8, ["a" * 2000] * 8
    assert 0 < policy.task_cost_ms(MODEL, short) < policy.task_cost_ms(MODEL, long)
    assert policy.task_cost_ms(MODEL, long) == pytest.approx(
        2 * policy.task_cost_ms(MODEL, long[:4])
    )


def test_a_new_identitys_larger_results_are_sampled_and_still_need_a_peer(
    sqlite_workspace: Workspace, wordllama: Embedder
) -> None:
    """Tasks of more texts than the sample: the server embeds a sample of a new
    identity's result, rejects it at once when the sample is wrong, and otherwise
    leaves it to an independent client's agreement."""
    with open_site(
        sqlite_workspace, wordllama, docs=36, contributions_batch=12, **DEFENCES
    ) as site:
        newcomer = site.browser()
        [task] = newcomer.tasks()
        assert newcomer.verdict(task)["status"] == "pending"  # its sample was right
        assert site.embedder.texts == PROBATION_SAMPLE and site.vectors() == {}

        liar = site.browser()
        [other] = liar.tasks()
        caught = liar.verdict(other, forged(other))
        assert caught["status"] == "rejected" and caught["trust"] < TRUST_FLOOR
        assert site.embedder.texts == 2 * PROBATION_SAMPLE

        site.clock.now += DEFENCES["contributions_related_seconds"] + 1
        peer = site.browser()  # another network, minted later: independent
        [same] = peer.tasks()
        assert same["taskId"] == task["taskId"]  # the half-done task first
        assert peer.verdict(same)["status"] == "accepted"
        assert len(site.vectors()) == 12 and site.embedder.texts == 3 * PROBATION_SAMPLE
        with site.ws.engine.connect() as conn:
            checked = dict(conn.execute(sa.select(clients.c.id, clients.c.checked)).all())
        ids = {b.lease()["clientId"]: b for b in (newcomer, liar, peer)}
        assert {ids[i]: n for i, n in checked.items()} == {newcomer: 1, liar: 0, peer: 1}
