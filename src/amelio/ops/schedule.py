"""The jobs `amelio serve` runs on its own: the nightly improve loop, the checks of
running canary rollouts, and optionally the search signals' aggregation, at the times
cron expressions give in the workspace's time zone.

Several replicas may serve one PostgreSQL database, and each runs this schedule:
a scheduled time must still run once. Each job has one row in ``scheduled_jobs``;
a replica runs a time only after one conditional UPDATE has claimed it (the time is
later than the row's last ``due_at``, and no live lease holds the row). The claim
carries a lease that the holder renews while the job runs, so a replica killed
mid-run frees the job when its lease expires; the interrupted time is then run
again by whichever replica claims it next. No advisory lock is involved: the same
statement works on SQLite, where one writer at a time decides the race.

A time missed while no replica was up runs once at start-up (``schedule_catch_up``):
only the latest missed time, not one run per missed night.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
from cronsim import CronSim, CronSimError

from amelio import db
from amelio.db.schema import scheduled_jobs, utcnow
from amelio.errors import ConfigError
from amelio.workspace.config import Settings
from amelio.workspace.folder import Workspace

__all__ = [
    "JOBS",
    "Job",
    "JobStatus",
    "Scheduler",
    "claim",
    "finish",
    "job_status",
    "next_times",
    "renew",
    "run_claimed",
    "zone",
]

log = logging.getLogger(__name__)

#: How far back a catch-up looks for a missed time.
CATCH_UP_WINDOW = timedelta(days=35)


def _improve(ws: Workspace) -> str:
    from amelio.improve.nightly import run_improve

    report = run_improve(ws)
    return f"run {report.run_id}: {len(report.proposals)} new proposal(s)"


def _signals(ws: Workspace) -> str:
    from amelio.search.aggregation import aggregate

    report = aggregate(ws)
    return f"{report.impressions} impression(s), {report.events} event(s) aggregated"


def _rollouts(ws: Workspace) -> str:
    from amelio.improve.rollouts import check_rollouts

    checked = check_rollouts(ws)
    moved = [c for c in checked if c.action != "none"]
    return f"{len(checked)} rollout(s) checked" + (
        ": " + ", ".join(f"#{c.rollout_id} {c.action}" for c in moved) if moved else ""
    )


@dataclass(frozen=True)
class Job:
    """A job of the schedule: its name, the setting that holds its cron expression,
    and what it does (returning one line for the record)."""

    name: str
    setting: str
    run: Callable[[Workspace], str]

    def expression(self, settings: Settings) -> str | None:
        """The job's cron expression, or None when its setting is off."""
        value = str(getattr(settings, self.setting)).strip()
        return None if value.lower() in ("", "off", "none", "false") else value


JOBS: tuple[Job, ...] = (
    Job("improve", "improve_schedule", _improve),
    Job("signals", "signals_schedule", _signals),
    Job("rollouts", "rollouts_schedule", _rollouts),
)


def zone(settings: Settings) -> ZoneInfo:
    try:
        return ZoneInfo(settings.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"AMELIO_TIMEZONE: {settings.timezone!r} is not a time zone (use "
            "an IANA name such as UTC or Europe/Paris)."
        ) from None


def _cron(job: Job, settings: Settings, start: datetime, *, reverse: bool = False) -> CronSim:
    expression = job.expression(settings)
    assert expression is not None
    try:
        return CronSim(expression, start.astimezone(zone(settings)), reverse=reverse)
    except CronSimError as exc:
        raise ConfigError(
            f"AMELIO_{job.setting.upper()}: {expression!r} is not a cron "
            f"expression ({exc}); use five fields, e.g. 0 3 * * *, or "
            "off."
        ) from None


def next_times(job: Job, settings: Settings, after: datetime, count: int = 1) -> list[datetime]:
    """The job's next ``count`` times after ``after``, in UTC ([] when it is off)."""
    if job.expression(settings) is None:
        return []
    times = _cron(job, settings, after)
    return [next(times).astimezone(UTC) for _ in range(count)]


def last_time(job: Job, settings: Settings, now: datetime) -> datetime | None:
    """The job's latest time at or before ``now``, within the catch-up window."""
    if job.expression(settings) is None:
        return None
    found = next(_cron(job, settings, now + timedelta(seconds=1), reverse=True), None)
    if found is None or found < now - CATCH_UP_WINDOW:
        return None
    return found.astimezone(UTC)


# -- claims -------------------------------------------------------------------------------


def _ensure(conn: sa.Connection, name: str, due_at: datetime | None) -> None:
    """The job's row, created on first sight with ``due_at`` as its last time, so
    that a new job does not catch up on times from before it existed."""
    db.insert_ignore(conn, scheduled_jobs, {"name": name, "due_at": due_at, "runs": 0}, ["name"])


def claim(
    ws: Workspace, name: str, due_at: datetime, holder: str, *, now: datetime | None = None
) -> bool:
    """Claim the run of job ``name`` for the time ``due_at``; True for exactly one
    claimant per time, whoever else tries."""
    now = now or utcnow()
    lease = now + timedelta(seconds=ws.settings.schedule_lease_seconds)
    row = scheduled_jobs.c
    with db.transaction(ws.engine) as conn:
        _ensure(conn, name, None)
        claimed = conn.execute(
            scheduled_jobs.update()
            .where(
                row.name == name,
                sa.or_(row.holder.is_(None), row.lease_expires_at < now),
                sa.or_(
                    row.due_at.is_(None),
                    row.due_at < due_at,
                    sa.and_(row.due_at == due_at, row.outcome == "running"),
                ),
            )
            .values(
                holder=holder,
                lease_expires_at=lease,
                due_at=due_at,
                started_at=now,
                finished_at=None,
                outcome="running",
                detail=None,
            )
        )
        return claimed.rowcount == 1


def renew(ws: Workspace, name: str, holder: str, *, now: datetime | None = None) -> bool:
    """Extend ``holder``'s lease; False when it no longer holds the job (its lease
    expired and another replica claimed it)."""
    now = now or utcnow()
    with db.transaction(ws.engine) as conn:
        done = conn.execute(
            scheduled_jobs.update()
            .where(scheduled_jobs.c.name == name, scheduled_jobs.c.holder == holder)
            .values(lease_expires_at=now + timedelta(seconds=ws.settings.schedule_lease_seconds))
        )
        return done.rowcount == 1


def finish(ws: Workspace, name: str, holder: str, outcome: str, detail: str) -> None:
    """Record the run's outcome and free the job (only if ``holder`` still holds it)."""
    with db.transaction(ws.engine) as conn:
        conn.execute(
            scheduled_jobs.update()
            .where(scheduled_jobs.c.name == name, scheduled_jobs.c.holder == holder)
            .values(
                holder=None,
                lease_expires_at=None,
                finished_at=utcnow(),
                outcome=outcome,
                detail=detail[:2000],
                runs=scheduled_jobs.c.runs + 1,
            )
        )


def run_claimed(ws: Workspace, job: Job, holder: str) -> str:
    """Run a claimed job, renewing its lease meanwhile; record and return the outcome.
    A job's failure is recorded, never raised: the schedule goes on."""
    stop = threading.Event()
    every = ws.settings.schedule_lease_seconds / 3

    def heartbeat() -> None:
        while not stop.wait(every):
            if not renew(ws, job.name, holder):
                log.warning("schedule: lost the lease on %s while it ran", job.name)
                return

    beat = threading.Thread(target=heartbeat, name=f"amelio-lease-{job.name}", daemon=True)
    beat.start()
    started = time.perf_counter()
    try:
        detail = job.run(ws)
        outcome = "ok"
    except Exception as exc:
        log.exception("schedule: %s failed", job.name)
        outcome, detail = "error", f"{type(exc).__name__}: {exc}"
    finally:
        stop.set()
        beat.join()
    detail = f"{detail} ({time.perf_counter() - started:.1f} s)"
    finish(ws, job.name, holder, outcome, detail)
    log.info("schedule: %s %s: %s", job.name, outcome, detail)
    return outcome


# -- status ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobStatus:
    name: str
    expression: str | None
    explained: str
    next_runs: tuple[datetime, ...]
    due_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    outcome: str | None
    detail: str | None
    runs: int
    holder: str | None
    lease_expires_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        def iso(value: datetime | None) -> str | None:
            return value.isoformat() if value else None

        return {
            "name": self.name,
            "schedule": self.expression or "off",
            "explained": self.explained,
            "nextRuns": [iso(t) for t in self.next_runs],
            "lastDueAt": iso(self.due_at),
            "lastStartedAt": iso(self.started_at),
            "lastFinishedAt": iso(self.finished_at),
            "lastOutcome": self.outcome,
            "lastDetail": self.detail,
            "runs": self.runs,
            "holder": self.holder,
            "leaseExpiresAt": iso(self.lease_expires_at),
        }


def job_status(ws: Workspace, *, count: int = 3, now: datetime | None = None) -> list[JobStatus]:
    """Each job: its schedule, its next ``count`` times, and its last run."""
    now = now or utcnow()
    with db.reading(ws.engine) as conn:
        rows = {r.name: r for r in conn.execute(sa.select(scheduled_jobs))}
    out = []
    for job in JOBS:
        expression = job.expression(ws.settings)
        explained = _cron(job, ws.settings, now).explain() if expression else "off"
        row = rows.get(job.name)
        out.append(
            JobStatus(
                job.name,
                expression,
                explained,
                tuple(next_times(job, ws.settings, now, count)),
                row.due_at if row else None,
                row.started_at if row else None,
                row.finished_at if row else None,
                row.outcome if row else None,
                row.detail if row else None,
                int(row.runs) if row else 0,
                row.holder if row else None,
                row.lease_expires_at if row else None,
            )
        )
    return out


# -- the scheduler ------------------------------------------------------------------------


class Scheduler:
    """One thread per scheduled job, in a service process. Each sleeps until its next
    time, claims it, and runs it if the claim is its own."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.jobs = [job for job in JOBS if job.expression(ws.settings) is not None]
        for job in self.jobs:  # a wrong expression or zone stops the start, with the reason
            next_times(job, ws.settings, utcnow())

    def start(self) -> None:
        for job in self.jobs:
            thread = threading.Thread(
                target=self._loop, args=(job,), daemon=True, name=f"amelio-schedule-{job.name}"
            )
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)

    def _catch_up(self, job: Job) -> None:
        """At start: record the job's last time on first sight, or run a missed one."""
        now = utcnow()
        latest = last_time(job, self.ws.settings, now)
        with db.transaction(self.ws.engine) as conn:
            _ensure(conn, job.name, latest)
            row = conn.execute(
                sa.select(scheduled_jobs).where(scheduled_jobs.c.name == job.name)
            ).one()
        due = row.due_at
        interrupted = row.outcome == "running" and (row.lease_expires_at or now) < now
        missed = latest is not None and (due is None or due < latest)
        if self.ws.settings.schedule_catch_up and (missed or interrupted):
            when = latest if missed else due
            assert when is not None
            if claim(self.ws, job.name, when, self.holder):
                log.info("schedule: catching up %s (due %s)", job.name, when.isoformat())
                run_claimed(self.ws, job, self.holder)

    def _loop(self, job: Job) -> None:
        try:
            self._catch_up(job)
        except Exception:
            log.exception("schedule: catching up %s failed", job.name)
        while not self._stop.is_set():
            [when] = next_times(job, self.ws.settings, utcnow())
            if self._stop.wait(max(0.0, (when - utcnow()).total_seconds())):
                return
            try:
                if claim(self.ws, job.name, when, self.holder):
                    run_claimed(self.ws, job, self.holder)
            except Exception:
                log.exception("schedule: %s at %s failed to start", job.name, when)
