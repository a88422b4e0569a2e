"""The results store: every run and every case result in one embedded SQLite file.

One row per run (start/finish time, status, the command that reproduces it, the environment fingerprint as JSON)
and one row per case result (a few columns to query plus the full BenchResult as JSON). Each write commits in its
own transaction, so a run killed mid-sweep keeps every case it finished; such a run never gets a finish time and is
listed as "incomplete". A file that is not ours (another program's SQLite, a text file, a damaged or truncated
database, a newer schema) raises StoreError naming the path, the problem and the fix, never a sqlite3 traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kernelkit.cache import cache_dir
from kernelkit.errors import KernelkitError
from kernelkit.measure.measurement import BenchResult

APPLICATION_ID = 0x4B4B5253  # "KKRS": kernelkit results store, in the SQLite header (PRAGMA application_id)
SCHEMA_VERSION = 2  # PRAGMA user_version; bump with a migration in Store._check_schema (2: results.gpu)
BUSY_TIMEOUT_S = 30.0  # how long a writer waits for another process's lock before giving up
BUSY_TIMEOUT_ENV = "KERNELKIT_STORE_TIMEOUT"  # seconds, instead of BUSY_TIMEOUT_S
FINISH_STATUSES = ("finished", "interrupted", "failed", "incomplete")
FIX = "pass --store with another path, or move the file away (a new store is then created there)"
SQLITE_MAGIC = b"SQLite format 3\x00"

SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, so a run id names one run for good
    started TEXT NOT NULL,                 -- ISO 8601, UTC
    finished TEXT,                         -- NULL while running, or forever when the process was killed
    status TEXT NOT NULL,                  -- running | finished | interrupted | failed
    command TEXT NOT NULL,                 -- the command line that reproduces the run
    op TEXT NOT NULL DEFAULT '',
    mode TEXT NOT NULL DEFAULT '',
    device TEXT NOT NULL DEFAULT '',
    env TEXT NOT NULL                      -- the environment fingerprint, JSON
);
CREATE TABLE results (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    case_key TEXT NOT NULL,                -- op/impl/size/dtype, matched across runs together with mode
    op TEXT NOT NULL, impl TEXT NOT NULL, size TEXT NOT NULL, dtype TEXT NOT NULL,
    mode TEXT NOT NULL, role TEXT NOT NULL, status TEXT NOT NULL,
    median_s REAL, gbps REAL, tflops REAL,
    suspect INTEGER NOT NULL DEFAULT 0,
    gpu INTEGER,                           -- the GPU that ran it in a run spread over several GPUs (or NULL)
    data TEXT NOT NULL                     -- BenchResult.to_dict() as JSON: the source of truth
);
CREATE INDEX results_by_run ON results(run_id);
"""
TABLES = {"runs": {"id", "started", "finished", "status", "command", "op", "mode", "device", "env"},
          "results": {"id", "run_id", "case_key", "status", "data"}}


class StoreError(KernelkitError):
    """The results store cannot be opened or read, or a run reference does not resolve."""


@dataclass(frozen=True)
class RunInfo:
    """One run as listed: status is "incomplete" when the run never finished (its process was killed)."""

    id: int
    started: str
    finished: str | None
    status: str
    command: str
    n_results: int
    n_passed: int
    device: str
    op: str
    mode: str
    env: dict[str, Any] = field(default_factory=dict)
    n_failed: int = 0  # results that neither passed nor were skipped


def default_store_path() -> Path:
    """The results store used when no --store is given: <kernelkit cache dir>/results.sqlite."""
    return cache_dir() / "results.sqlite"


class Store:
    """A results store on one SQLite file. Open with Store.open(path); use as a context manager or close()."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn

    @classmethod
    def open(cls, path: Path | str | None = None, *, create: bool = True) -> Store:
        """Open the store at ``path`` (default: default_store_path()), creating the file and its parents if missing
        (with ``create=False`` a missing file given as ``path`` is a StoreError: reading never makes a store)."""
        explicit = path is not None
        path = Path(path).expanduser() if path is not None else default_store_path()
        _sniff(path)
        if explicit and not create and not path.exists():
            raise StoreError(f"results store {path}: no such file; check the path given to --store (the default "
                             f"store is {default_store_path()})")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(path), timeout=busy_timeout(), isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"results store {path}: cannot open it ({exc}); check the directory's permissions, "
                             f"or pass --store with another path") from exc
        store = cls(path, conn)
        try:
            with store._guard("opening"):
                conn.execute("PRAGMA foreign_keys = ON")
                store._check_schema()
        except BaseException:
            conn.close()
            raise
        return store

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing: each call is one committed transaction --

    def begin_run(self, command: str, env: dict[str, Any], *, op: str = "", mode: str = "", device: str = "") -> int:
        """Record a new run (status 'running') and return its id. ``device`` is the name listed (default: from env)."""
        with self._transaction("starting a run") as conn:
            cur = conn.execute("INSERT INTO runs (started, status, command, op, mode, device, env) "
                               "VALUES (?, 'running', ?, ?, ?, ?, ?)",
                               (_now(), command, op, mode, device, json.dumps(env, sort_keys=True, default=str)))
            return int(cur.lastrowid)

    def add_result(self, run_id: int, result: BenchResult) -> None:
        """Store one case result of run ``run_id``; it is on disk when this returns."""
        m = result.measurement
        timed = m is not None and bool(m.samples)
        row = (run_id, result.case_id, result.op, result.impl, "x".join(map(str, result.size)), result.dtype,
               result.mode, result.role, result.status.value, m.median if timed else None,
               m.gbps if timed else None, m.tflops if timed else None, int(result.suspect), result.gpu,
               json.dumps(result.to_dict(), default=str))
        with self._transaction("saving a result") as conn:
            self._require_run(conn, run_id)
            conn.execute("INSERT INTO results (run_id, case_key, op, impl, size, dtype, mode, role, status, median_s, "
                         "gbps, tflops, suspect, gpu, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)

    def finish_run(self, run_id: int, status: str = "finished") -> None:
        """Mark run ``run_id`` as ended: 'finished', 'interrupted' (Ctrl-C), 'failed' (the sweep crashed) or
        'incomplete' (some results could not be stored)."""
        if status not in FINISH_STATUSES:
            raise ValueError(f"finish_run status must be one of {FINISH_STATUSES}, not {status!r}")
        with self._transaction("finishing a run") as conn:
            self._require_run(conn, run_id)
            conn.execute("UPDATE runs SET finished = ?, status = ? WHERE id = ?", (_now(), status, run_id))

    # -- reading --

    def runs(self, limit: int = 20) -> list[RunInfo]:
        """The latest ``limit`` runs, newest first."""
        return self._run_rows("ORDER BY r.id DESC LIMIT ?", (limit,))

    def run(self, ref: str | int) -> RunInfo:
        """One run, by id, 'latest'/'last', or -N (the N-th latest)."""
        return self._run_rows("WHERE r.id = ?", (self.resolve_run(ref),))[0]

    def resolve_run(self, ref: str | int) -> int:
        """The id of the run that ``ref`` names: an id, 'latest'/'last', or -N (-1 is the latest, -2 the one before)."""
        text = str(ref).strip().lower()
        text = "-1" if text in ("latest", "last") else text
        try:
            n = int(text)
            if abs(n) >= 2**63:
                raise ValueError(text)
        except ValueError:
            raise StoreError(f"results store {self.path}: {ref!r} is not a run: give a run id, 'latest', or -N "
                             f"for the N-th latest; {self._latest_hint()}") from None
        with self._guard("looking up a run"):
            if n < 0:
                row = self._conn.execute("SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?", (-n - 1,)).fetchone()
            else:
                row = self._conn.execute("SELECT id FROM runs WHERE id = ?", (n,)).fetchone()
        if row is None:
            raise StoreError(f"results store {self.path}: no run {ref}; {self._latest_hint()}")
        return int(row[0])

    def results(self, ref: str | int) -> list[BenchResult]:
        """Every case result of a run, in the order they were stored."""
        run_id = self.resolve_run(ref)
        with self._guard("reading results"):
            rows = self._conn.execute("SELECT data FROM results WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
        try:
            return [BenchResult.from_dict(json.loads(data)) for (data,) in rows]
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"results store {self.path}: a result of run {run_id} cannot be read ({exc!r}); "
                             f"the file is damaged: {FIX}") from exc

    # -- internals --

    def _run_rows(self, where: str, params: tuple[Any, ...]) -> list[RunInfo]:
        sql = ("SELECT r.id, r.started, r.finished, r.status, r.command, r.device, r.op, r.mode, r.env, "
               "(SELECT COUNT(*) FROM results WHERE run_id = r.id), "
               "(SELECT COUNT(*) FROM results WHERE run_id = r.id AND status = 'PASSED'), "
               "(SELECT COUNT(*) FROM results WHERE run_id = r.id AND status NOT IN ('PASSED', 'SKIPPED')) "
               "FROM runs r " + where)
        with self._guard("listing runs"):
            rows = self._conn.execute(sql, params).fetchall()
        out = []
        for rid, started, finished, status, command, device, op, mode, env_text, n, n_passed, n_failed in rows:
            try:
                env = json.loads(env_text)
            except ValueError as exc:
                raise StoreError(f"results store {self.path}: run {rid}'s environment is damaged; {FIX}") from exc
            device = device or str(env.get("device_name") or env.get("gpu") or env.get("device") or "")
            out.append(RunInfo(rid, started, finished, status if finished else "incomplete", command, n, n_passed,
                               device, op, mode, env, n_failed))
        return out

    def _latest_hint(self) -> str:
        with self._guard("listing runs"):
            ids = [r[0] for r in self._conn.execute("SELECT id FROM runs ORDER BY id DESC LIMIT 5")]
        return f"latest runs: {', '.join(map(str, ids))}" if ids else "the store has no runs yet"

    def _require_run(self, conn: sqlite3.Connection, run_id: int) -> None:
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
            raise StoreError(f"results store {self.path}: no run {run_id}; {self._latest_hint()}")

    def _check_schema(self) -> None:
        """Create our tables in a new (or empty) file; refuse anyone else's file and newer schemas."""
        conn = self._conn
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if app_id not in (0, APPLICATION_ID):
            raise StoreError(f"results store {self.path}: this SQLite file belongs to another program "
                             f"(application_id {app_id:#x}, kernelkit's is {APPLICATION_ID:#x}); {FIX}")
        if version > SCHEMA_VERSION and app_id == APPLICATION_ID:
            raise StoreError(f"results store {self.path}: written by a newer kernelkit (schema {version}; this "
                             f"version reads up to {SCHEMA_VERSION}); upgrade kernelkit, or {FIX}")
        if app_id == 0:
            with self._transaction("creating the store"):
                # Re-read under the write lock: another process may have created the store while we waited.
                if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                    if tables := _tables(conn):
                        raise StoreError(f"results store {self.path}: this SQLite file is not a kernelkit results "
                                         f"store (it holds tables {', '.join(sorted(tables))}); {FIX}")
                    for statement in filter(str.strip, SCHEMA.split(";")):
                        conn.execute(statement)
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        elif version < SCHEMA_VERSION:
            self._migrate()
        tables = _tables(conn)
        missing = [f"{t}.{c}" for t, cols in TABLES.items() for c in sorted(cols - tables.get(t, set()))]
        if missing:
            raise StoreError(f"results store {self.path}: kernelkit's header but not its tables (missing "
                             f"{', '.join(missing[:5])}); the file is damaged: {FIX}")

    def _migrate(self) -> None:
        """Bring an older kernelkit store up to SCHEMA_VERSION, in place (1 -> 2: results.gpu, NULL for old rows)."""
        with self._transaction("upgrading the store's schema") as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]  # again, under the write lock
            if version < 2 and "gpu" not in _tables(conn).get("results", {"gpu"}):
                conn.execute("ALTER TABLE results ADD COLUMN gpu INTEGER")
            if version < SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextlib.contextmanager
    def _transaction(self, doing: str) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on any error): one write, all or nothing."""
        with self._guard(doing):
            self._conn.execute("BEGIN IMMEDIATE")  # take the write lock now, waiting up to BUSY_TIMEOUT_S
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:  # SQLite may already have rolled back (disk full, I/O error)
                    self._conn.execute("ROLLBACK")
                raise

    @contextlib.contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """Turn sqlite3 errors into a StoreError that names the file, the problem and the fix."""
        try:
            yield
        except sqlite3.Error as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                hint = (f"another process held the file locked for over {busy_timeout():g} s (set "
                        f"{BUSY_TIMEOUT_ENV}=SECONDS to wait longer); retry when it finishes, or pass --store with "
                        "another path")
            elif "full" in text:
                hint = "the disk holding it is full (or over quota): free some space, or pass --store on another disk"
            elif "readonly" in text or "unable to open" in text or "I/O" in text:
                hint = "check the permissions of the file and its directory, and free space; or pass --store elsewhere"
            else:
                hint = f"the file is damaged or not a kernelkit results store: {FIX}"
            raise StoreError(f"results store {self.path}: {doing} failed ({text}); {hint}") from exc


def busy_timeout() -> float:
    """Seconds a writer waits for another process's lock: $KERNELKIT_STORE_TIMEOUT, else BUSY_TIMEOUT_S."""
    try:
        seconds = float(os.environ.get(BUSY_TIMEOUT_ENV, BUSY_TIMEOUT_S))
    except ValueError:
        return BUSY_TIMEOUT_S
    return seconds if 0 <= seconds < 1e6 else BUSY_TIMEOUT_S


def _tables(conn: sqlite3.Connection) -> dict[str, set[str]]:
    """User tables of the database and their column names."""
    sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    names = [r[0] for r in conn.execute(sql)]
    return {n: {r[1] for r in conn.execute(f'PRAGMA table_info("{n}")')} for n in names}


def _sniff(path: Path) -> None:
    """Refuse, before SQLite sees it, a file that is not a SQLite database or is shorter than its header says.

    An empty file is a valid new store (SQLite treats 0 bytes as an empty database). The length check is skipped
    while a hot journal exists: SQLite rolls an interrupted commit back on open, which may change the length.
    """
    if path.is_dir():
        raise StoreError(f"results store {path}: is a directory; pass --store with a file path")
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            header = f.read(100)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"results store {path}: cannot read it ({exc}); check its permissions, or {FIX}") from exc
    if size == 0:
        return
    if not header.startswith(SQLITE_MAGIC[: len(header)]) or len(header) < len(SQLITE_MAGIC):
        kind = f"a text file starting {header[:16]!r}" if header.isascii() else "a binary file"
        raise StoreError(f"results store {path}: not a SQLite database ({kind}); {FIX}")
    if len(header) < 100:
        raise StoreError(f"results store {path}: truncated ({size} bytes, less than a SQLite header); {FIX}")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    header_valid = header[24:28] == header[92:96]  # the in-header page count is only trusted when these match
    journal = any(Path(f"{path}{suffix}").exists() for suffix in ("-journal", "-wal"))
    if header_valid and not journal and pages * page_size > size:
        raise StoreError(f"results store {path}: truncated ({size} bytes; its header says {pages} pages of "
                         f"{page_size} bytes); the file is damaged: {FIX}")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
