"""Routing snapshots: ``amelio route`` without the database layer.

Routing a message costs a fraction of a millisecond; a command-line process that
opens the workspace to do it first imports the settings, SQLAlchemy and the skills
store (about half a second). So ``amelio route`` saves what its router was built
from in ``.amelio/cache/``, and the next run rebuilds the very same router from that
file with the standard library's ``sqlite3`` and nothing heavier than numpy.

A snapshot holds the skills' routing metadata (name, description, triggers,
keywords, scope), each skill's training examples, the vectors of all of them
(float32, so only the message is embedded) and the learned out-of-scope threshold.
It is used while two things hold:

* **the same inputs**: the workspace folder, the project, the ``--scorer`` asked for,
  Amelio's version, the bytes of ``amelio.toml``, every ``AMELIO_*`` environment
  variable and the times of the site-packages folders (a package installed, removed
  or upgraded: a plugin, ``amelio[semantic]``, the embedding model's weights), hashed
  together. Settings are never re-derived outside :mod:`amelio.workspace.config`;
  any difference and the full path runs.
* **the same routing generation**: every write to a skill's row or a routing
  example gives the database's one routing generation a new random value in its own
  transaction (:func:`amelio.skills.store.bump_routing_generation`), whichever
  process makes it. The snapshot keeps the value read before its router was built
  (a write in between leaves it stale, never wrong), and each run reads the value
  again on a read-only connection: one row, any other value and the full path runs,
  and writes a new snapshot.

The router is built by the same :class:`amelio.routing.router.Router` from the same
inputs, so a snapshot's route equals the full path's (``tests/test_routing_snapshot.py``).
Only SQLite workspaces get one (a PostgreSQL driver alone takes longer to import
than the whole fast path), and only Amelio's own scorers, when no plugin registers
one under the same name (a plugin's would need the plugin manager). The file is JSON
and raw float32, never pickled, written atomically and readable by its owner only (it
holds the examples, which are users' messages). Anything unexpected in it (truncated,
edited out of shape, pointing at a missing database) means the full path, never an
error. It is trusted as the workspace's database is: whoever can write ``.amelio/``
can write both, so a forged snapshot is not defended against.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import struct
import sys
from contextlib import closing
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amelio._version import __version__
from amelio.workspace.discovery import CONFIG_FILE, DATA_DIR, ENV_PREFIX, find_workspace

if TYPE_CHECKING:
    from amelio.routing.router import Route, Router
    from amelio.workspace.folder import Workspace

__all__ = ["FORMAT", "route_and_save", "route_from_snapshot", "snapshot_path"]

logger = logging.getLogger(__name__)

#: Bumped whenever what a snapshot holds, or how a router is built from it, changes.
FORMAT = 2
_HEADER = struct.Struct("<Q")
#: The routing generation (``routing_state`` in :mod:`amelio.db.schema`), read with
#: the standard library's ``sqlite3``: the one query the fast path runs.
_GENERATION = "SELECT generation FROM routing_state WHERE id = 1"


def snapshot_path(root: Path, project: str, scorer: str | None) -> Path:
    """Where the snapshot for ``project`` and ``--scorer`` lies (one per pair)."""
    key = hashlib.sha256(f"{project}\0{scorer or ''}".encode()).hexdigest()[:24]
    return root / DATA_DIR / "cache" / f"route-{key}.snapshot"


def _inputs(root: Path, project: str, scorer: str | None) -> str:
    """A digest of everything besides the database that settings and routing read."""
    digest = hashlib.sha256()
    toml = root / CONFIG_FILE
    env = sorted((k, v) for k, v in os.environ.items() if k.upper().startswith(ENV_PREFIX))
    # Installing, removing or upgrading a package (a plugin, amelio[semantic] and the
    # model weights it ships) changes a site-packages folder's time.
    installed = [
        (p, os.stat(p).st_mtime_ns)
        for p in sys.path
        if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p)
    ]
    for part in (
        str(FORMAT),
        __version__,
        str(root),
        project,
        scorer or "",
        json.dumps(env),
        json.dumps(installed),
    ):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    digest.update(toml.read_bytes() if toml.is_file() else b"")
    return digest.hexdigest()


def _generation(database: Path) -> int:
    """The routing generation of the SQLite file ``database``, read without writing."""
    with closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as conn:
        (generation,) = conn.execute(_GENERATION).fetchone()
    return int(generation)


# -- the fast path ----------------------------------------------------------------------


def route_from_snapshot(
    workspace: Path | None,
    message: str,
    *,
    project: str,
    scorer: str | None = None,
    limit: int | None = None,
) -> Route | None:
    """``message`` routed by the snapshot of the workspace found from ``workspace``
    (as ``--workspace`` does), or None when there is no current one."""
    try:
        root = find_workspace(workspace)
        path = snapshot_path(root, project, scorer)
        if not path.is_file():
            logger.debug("No routing snapshot at %s: routing through the database.", path)
            return None
        router, header = _load(path, root, project, scorer)
    except Exception as exc:  # a cache never becomes an error: the full path runs
        logger.debug("Routing snapshot not used: %s", exc)
        return None
    return router.route(message, limit=limit or header["limit"])


class _Stale(Exception):
    """The snapshot no longer describes the workspace."""


def _load(
    path: Path, root: Path, project: str, scorer: str | None
) -> tuple[Router, dict[str, Any]]:
    import numpy as np

    from amelio.routing.learned import Calibration, TrainingData, remember_vectors
    from amelio.routing.router import Router, builtin_scorers
    from amelio.skills.model import SkillSpec

    raw = path.read_bytes()
    (size,) = _HEADER.unpack_from(raw)
    header: dict[str, Any] = json.loads(raw[_HEADER.size : _HEADER.size + size])
    if header.get("format") != FORMAT or header.get("inputs") != _inputs(root, project, scorer):
        raise _Stale("settings, environment, packages or version changed")
    if _generation(Path(header["database"])) != header["generation"]:
        raise _Stale("a skill or a routing example was written")
    specs = [
        SkillSpec(
            name=s["name"],
            description=s["description"],
            triggers=tuple(s["triggers"]),
            keywords=tuple(s["keywords"]),
        )
        for s in header["skills"]
    ]
    model = header["model"]
    embedder = None
    if model:
        from amelio.embeddings import load_embedder

        embedder = load_embedder(model)
        texts = header["texts"]
        matrix = np.frombuffer(
            raw, dtype="<f4", offset=_HEADER.size + size, count=len(texts) * header["dim"]
        ).reshape(len(texts), -1)
        remember_vectors(model, texts, matrix)
    calibration = header["calibration"]
    data = TrainingData(
        examples=header["examples"],
        embedder=embedder,
        min_score=header["minScore"],
        previous=Calibration(**calibration) if calibration else None,
    )
    router = Router(
        specs,
        header["scorer"],
        data=data,
        registry=builtin_scorers(),
        scopes=[s["scope"] for s in header["skills"]],
    )
    return router, header


# -- the full path, which writes the snapshot -------------------------------------------


def route_and_save(
    ws: Workspace,
    message: str,
    *,
    project: str,
    scorer: str | None = None,
    limit: int | None = None,
) -> Route:
    """``message`` routed through the database (:func:`amelio.routing.router.project_router`),
    then the router saved as the snapshot the next run will use, where it can be."""
    from amelio.routing.router import builtin_scorers, project_router, scorers
    from amelio.skills.store import routing_generation

    database = _sqlite_file(ws)
    name = scorer or ws.settings.router_scorer
    generation = None
    builtin = builtin_scorers().get(name)
    if database is not None and builtin is not None and scorers().get(name) is builtin:
        generation = routing_generation(ws.engine)  # read before the build: stale, never wrong
    router = project_router(ws, project=project, scorer=scorer)
    route = router.route(message, limit=limit or ws.settings.router_limit)
    if generation is not None and database is not None:
        try:
            _save(ws, router, project, scorer, database, generation)
        except Exception as exc:  # a read-only workspace still routes
            logger.debug("Routing snapshot not written: %s", exc)
    return route


def _sqlite_file(ws: Workspace) -> Path | None:
    url = ws.engine.url
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database).resolve()


def _save(
    ws: Workspace,
    router: Router,
    project: str,
    scorer: str | None,
    database: Path,
    generation: int,
) -> None:
    import numpy as np

    from amelio.routing.learned import known_vectors
    from amelio.routing.lexical import skill_text

    specs = router.specs
    data = router.data
    examples = [list(e) for e in data.examples] if data is not None else []
    embedder = data.embedder if data is not None else None
    texts: list[str] = []
    matrix = np.zeros((0, 0), dtype="<f4")
    if embedder is not None:
        texts = list(
            dict.fromkeys([*(skill_text(s) for s in specs), *(t for own in examples for t in own)])
        )
        matrix = np.ascontiguousarray(known_vectors(embedder, texts), dtype="<f4")
    calibration = router.calibration
    header = {
        "format": FORMAT,
        "inputs": _inputs(ws.root.resolve(), project, scorer),
        "database": str(database),
        "generation": generation,
        "scorer": router.scorer,
        "limit": ws.settings.router_limit,
        "minScore": data.min_score if data is not None else None,
        "model": embedder.model if embedder is not None else None,
        "calibration": asdict(calibration) if router.learns else None,
        "skills": [
            {
                "name": s.name,
                "description": s.description,
                "triggers": list(s.triggers),
                "keywords": list(s.keywords),
                "scope": scope,
            }
            for s, scope in zip(specs, router.scopes, strict=True)
        ],
        "examples": examples,
        "texts": texts,
        "dim": int(matrix.shape[1]) if matrix.size else 0,
    }
    encoded = json.dumps(header, ensure_ascii=False).encode()
    path = snapshot_path(ws.root.resolve(), project, scorer)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_HEADER.pack(len(encoded)) + encoded + matrix.tobytes())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
