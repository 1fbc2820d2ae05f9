"""The schedule `amelio serve` keeps: one run per scheduled time whatever the number of
replicas, leases that free a killed holder's job, catch-up after downtime."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from amelio.cli import main
from amelio.db.schema import improve_runs, scheduled_jobs
from amelio.errors import ConfigError
from amelio.ops import schedule
from amelio.ops.schedule import JOBS, Scheduler, claim, finish, job_status, last_time, next_times
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, open_workspace
from support.processes import ServeProcess

IMPROVE = JOBS[0]
T0 = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)


def _row(ws: Workspace, name: str = "improve") -> sa.Row[tuple[object, ...]]:
    with ws.engine.connect() as conn:
        return conn.execute(sa.select(scheduled_jobs).where(scheduled_jobs.c.name == name)).one()


def _runs(ws: Workspace) -> int:
    """The improve job's recorded runs; 0 before its row exists."""
    with ws.engine.connect() as conn:
        return int(
            conn.scalar(sa.select(scheduled_jobs.c.runs).where(scheduled_jobs.c.name == "improve"))
            or 0
        )


def _improve_runs(ws: Workspace) -> int:
    with ws.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(improve_runs)) or 0)


def test_cron_times_follow_the_workspace_time_zone(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMELIO_TIMEZONE", "Europe/Paris")
    ws = open_workspace(workspace.root)
    try:
        after = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
        # 03:00 in Paris is 02:00 UTC in winter, 01:00 UTC in summer.
        assert next_times(IMPROVE, ws.settings, after, 2) == [
            datetime(2026, 12, 3, 2, 0, tzinfo=UTC),
            datetime(2026, 12, 4, 2, 0, tzinfo=UTC),
        ]
        assert next_times(IMPROVE, ws.settings, datetime(2026, 7, 1, tzinfo=UTC)) == [
            datetime(2026, 7, 1, 1, 0, tzinfo=UTC)
        ]
        assert last_time(IMPROVE, ws.settings, after) == datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
        monkeypatch.setenv("AMELIO_IMPROVE_SCHEDULE", "61 * * * *")
        with pytest.raises(ConfigError, match="AMELIO_IMPROVE_SCHEDULE: '61 \\* \\* \\* \\*'"):
            Scheduler(open_workspace(workspace.root))
        monkeypatch.setenv("AMELIO_IMPROVE_SCHEDULE", "off")
        assert next_times(IMPROVE, open_workspace(workspace.root).settings, after) == []
    finally:
        ws.dispose()


def test_one_claim_per_scheduled_time_however_many_race(workspace: Workspace) -> None:
    barrier = threading.Barrier(8)
    won: list[str] = []

    def race(n: int) -> None:
        barrier.wait()
        if claim(workspace, "improve", T0, f"replica-{n}"):
            won.append(f"replica-{n}")

    threads = [threading.Thread(target=race, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    finish(workspace, "improve", won[0], "ok", "done")
    assert not claim(workspace, "improve", T0, "late")  # that time ran: never again
    assert claim(workspace, "improve", T0 + timedelta(days=1), "late")  # the next one runs
    row = _row(workspace)
    assert (row.holder, row.outcome, row.runs) == ("late", "running", 1)


def test_a_killed_holders_lease_expires_and_its_time_runs_again(workspace: Workspace) -> None:
    lease = timedelta(seconds=workspace.settings.schedule_lease_seconds)
    assert claim(workspace, "improve", T0, "killed", now=T0)
    # While the lease lives, nobody else runs the job: not this time, not the next.
    assert not claim(workspace, "improve", T0, "other", now=T0 + lease / 2)
    assert not claim(workspace, "improve", T0 + timedelta(days=1), "other", now=T0 + lease / 2)
    # The holder was killed: no renewal, no finish. Its lease expires, and the
    # interrupted time is claimed again.
    assert claim(workspace, "improve", T0, "other", now=T0 + lease + timedelta(seconds=1))
    finish(workspace, "improve", "killed", "ok", "a ghost")  # ignored: no longer the holder
    row = _row(workspace)
    assert (row.holder, row.outcome, row.runs) == ("other", "running", 0)
    assert schedule.renew(workspace, "improve", "other")
    assert not schedule.renew(workspace, "improve", "killed")


def test_a_missed_night_runs_once_at_start_and_a_new_job_does_not(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = Scheduler(workspace)
    first._catch_up(IMPROVE)  # first sight: the last time is recorded, nothing runs
    assert _improve_runs(workspace) == 0
    assert _row(workspace).due_at is not None
    with workspace.engine.begin() as conn:  # the server was down for two nights
        conn.execute(
            scheduled_jobs.update().values(due_at=_row(workspace).due_at - timedelta(days=2))
        )
    Scheduler(workspace)._catch_up(IMPROVE)
    Scheduler(workspace)._catch_up(IMPROVE)  # a second replica starting: nothing more
    assert _improve_runs(workspace) == 1
    row = _row(workspace)
    assert row.outcome == "ok" and row.runs == 1 and row.holder is None
    assert row.detail.startswith("run ")
    monkeypatch.setenv("AMELIO_SCHEDULE_CATCH_UP", "false")
    no_catch_up = open_workspace(workspace.root)
    try:
        with no_catch_up.engine.begin() as conn:
            conn.execute(
                scheduled_jobs.update().values(due_at=_row(no_catch_up).due_at - timedelta(days=2))
            )
        Scheduler(no_catch_up)._catch_up(IMPROVE)
        assert _improve_runs(no_catch_up) == 1
    finally:
        no_catch_up.dispose()


def test_the_loop_runs_the_job_at_its_time_and_records_a_failure(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    times: list[datetime] = []

    def soon(
        job: schedule.Job, settings: object, after: datetime, count: int = 1
    ) -> list[datetime]:
        times.append(after.replace(microsecond=0) + timedelta(seconds=1))
        return [times[-1]]

    def broken(ws: Workspace) -> str:
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(schedule, "next_times", soon)
    monkeypatch.setattr(schedule, "JOBS", (schedule.Job("improve", "improve_schedule", broken),))
    scheduler = Scheduler(workspace)
    scheduler.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _runs(workspace) < 2:
            time.sleep(0.05)
    finally:
        scheduler.stop()
    row = _row(workspace)
    assert row.runs >= 2 and row.outcome == "error"  # a failure is recorded; the next runs
    assert row.detail.startswith("RuntimeError: the disk is full")
    assert _aware(row.due_at) in times


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@pytest.mark.slow
@pytest.mark.postgres
def test_two_service_processes_on_postgresql_run_a_missed_night_once(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMELIO_DATABASE_URL", postgres_url)
    from amelio.workspace.folder import init_workspace

    ws, _ = init_workspace(tmp_path / "ws")
    try:
        Scheduler(ws)._catch_up(IMPROVE)  # the job exists; then two nights are missed
        with ws.engine.begin() as conn:
            conn.execute(scheduled_jobs.update().values(due_at=_row(ws).due_at - timedelta(days=2)))
        _, admin = keys.create_key(ws.engine, name="ops", role="admin")
        env = {**os.environ, "AMELIO_DATABASE_URL": postgres_url, "AMELIO_WARM_UP": "false"}
        with (
            ServeProcess(ws.root, workers=2, env=env, log=tmp_path / "a.log") as one,
            ServeProcess(ws.root, env=env, log=tmp_path / "b.log"),
        ):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and _row(ws).outcome != "ok":
                time.sleep(0.1)
            time.sleep(1.0)  # time for a second run to show, if there were one
            jobs = httpx.get(
                f"{one.base}/v1/schedule", headers={"Authorization": f"Bearer {admin}"}
            ).json()["jobs"]
        assert _improve_runs(ws) == 1  # three processes started; one ran the missed night
        row = _row(ws)
        assert row.runs == 1 and row.outcome == "ok"
        [improve] = [j for j in jobs if j["name"] == "improve"]
        assert improve["lastOutcome"] == "ok" and len(improve["nextRuns"]) == 3
    finally:
        ws.dispose()


def test_cli_schedule_shows_next_runs_and_the_last_outcome(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert claim(workspace, "improve", T0, "me")
    finish(workspace, "improve", "me", "ok", "run 7: 2 new proposal(s) (0.4 s)")
    runner = CliRunner()
    done = runner.invoke(main, ["-w", str(workspace.root), "schedule"])
    assert done.exit_code == 0, done.output
    assert "0 3 * * * (At 03:00 every day)" in done.output
    assert "ok: run 7: 2 new proposal(s)" in done.output and "Times in UTC." in done.output
    monkeypatch.setenv("AMELIO_SIGNALS_SCHEDULE", "*/10 * * * *")
    done = runner.invoke(main, ["-w", str(workspace.root), "schedule", "--json", "--next", "2"])
    [improve, signals, rollouts] = __import__("json").loads(done.output)
    assert improve["runs"] == 1 and improve["lastDetail"].startswith("run 7")
    assert signals["schedule"] == "*/10 * * * *" and len(signals["nextRuns"]) == 2
    assert rollouts["schedule"] == "* * * * *"  # canary checks, every minute by default
    assert [s.name for s in job_status(workspace)] == ["improve", "signals", "rollouts"]
