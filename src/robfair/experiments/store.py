"""The run index: one SQLite file per study output folder (stdlib ``sqlite3``, WAL mode, busy timeout).

    store = Store("runs/frl-table/index.sqlite")
    store.register(spec, run_dir)                  # a row per run: pending
    store.claim(spec.name)                         # atomic: 'claimed' | 'done' | 'busy'
    store.heartbeat(spec.name); store.finish(spec.name, "done", metrics=...)
    store.rows()                                   # status, attempts, timings, headline metrics

Claims are atomic (``BEGIN IMMEDIATE``): of any number of workers (processes, hosts sharing the
file) exactly one gets a run. A claim records pid, host, the process start time and a heartbeat;
a 'running' row whose process is gone (same host) or whose heartbeat is older than ``stale_after``
seconds (any host) is stale and may be claimed again - the run then resumes from its checkpoints.
Every claim, release and finish is also an ``events`` row (the attempt log).

The index only coordinates; the run folders hold the results. A lost index is rebuilt from them.
WAL needs one host's shared memory: on a cluster file system use ``wal=False`` (the Slurm backend does).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable

from ..errors import ConfigError

STATUSES = ("pending", "running", "done", "failed")
INDEX_NAME = "index.sqlite"
METRIC_COLUMNS = ("clean_avg", "clean_worst", "rob_avg", "rob_worst", "rob_gap", "worst_class")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    study TEXT,
    grp TEXT,
    run_dir TEXT,
    config_hash TEXT,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'done', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    pid INTEGER, pid_start TEXT, host TEXT, heartbeat REAL, job_id TEXT,
    created REAL, started REAL, finished REAL, seconds REAL, error TEXT,
    clean_avg REAL, clean_worst REAL, rob_avg REAL, rob_worst REAL, rob_gap REAL, worst_class TEXT
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    time REAL NOT NULL,
    event TEXT NOT NULL,
    pid INTEGER, host TEXT, detail TEXT
);
CREATE INDEX IF NOT EXISTS events_run ON events (run_id);
"""


def hostname() -> str:
    return socket.gethostname()


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux /proc; None elsewhere or when it is gone). With the
    pid it identifies a process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None  # field 22 of stat: starttime


def process_alive(pid: int | None, start: str | None = None) -> bool:
    """Is the process (pid, start time) alive on this host? Zombies count as dead."""
    if not pid:
        return False
    if Path("/proc/self/stat").exists():  # Linux: also tells zombies and reused pids apart
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        rest = stat[stat.rfind(")") + 2:].split()
        if rest and rest[0] in ("Z", "X"):
            return False
        return start is None or (len(rest) > 19 and rest[19] == start)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Store:
    """The SQLite index of one study folder. Open one ``Store`` per process (or thread)."""

    def __init__(self, path: str | Path, *, wal: bool = True, timeout: float = 60.0,
                 stale_after: float = 120.0) -> None:
        self.path = Path(path)
        self.stale_after = float(stale_after)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None)
            self.db.row_factory = sqlite3.Row
            self.db.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            self.db.execute(f"PRAGMA journal_mode = {'WAL' if wal else 'DELETE'}")
            self.db.execute("PRAGMA synchronous = NORMAL")
            with self._write():
                for stmt in filter(str.strip, _SCHEMA.split(";")):
                    self.db.execute(stmt)
        except sqlite3.DatabaseError as e:
            raise ConfigError(f"the run index {self.path} cannot be opened ({e}); delete it (it is rebuilt "
                              "from the run folders) or check the file system") from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ transactions
    class _Tx:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def __enter__(self) -> sqlite3.Connection:
            self.db.execute("BEGIN IMMEDIATE")  # take the write lock now: read-check-write is atomic
            return self.db

        def __exit__(self, typ: Any, *_: Any) -> None:
            self.db.execute("ROLLBACK" if typ else "COMMIT")

    def _write(self) -> "Store._Tx":
        return Store._Tx(self.db)

    def _event(self, run_id: str, event: str, pid: int | None = None, detail: Any = None) -> None:
        self.db.execute("INSERT INTO events (run_id, time, event, pid, host, detail) VALUES (?, ?, ?, ?, ?, ?)",
                        (run_id, time.time(), event, pid, hostname(),
                         None if detail is None else json.dumps(detail, default=str)))

    # ------------------------------------------------------------------ rows
    def register(self, run_id: str, *, study: str = "", group: str = "", run_dir: str | Path = "",
                 config_hash: str = "") -> None:
        """Add a pending row for a run (an existing row keeps its status; its hash is updated)."""
        with self._write() as db:
            row = db.execute("SELECT config_hash FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                db.execute("INSERT INTO runs (id, study, grp, run_dir, config_hash, status, created) "
                           "VALUES (?, ?, ?, ?, ?, 'pending', ?)",
                           (run_id, study, group, str(run_dir), config_hash, time.time()))
            elif row["config_hash"] != config_hash:
                db.execute("UPDATE runs SET config_hash = ?, run_dir = ?, grp = ? WHERE id = ?",
                           (config_hash, str(run_dir), group, run_id))

    def get(self, run_id: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return dict(row) if row is not None else None

    def rows(self, ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
        rows = [dict(r) for r in self.db.execute("SELECT * FROM runs ORDER BY rowid")]
        if ids is not None:
            want = list(ids)
            by_id = {r["id"]: r for r in rows}
            return [by_id[i] for i in want if i in by_id]
        return rows

    def events(self, run_id: str | None = None) -> list[dict[str, Any]]:
        q = "SELECT * FROM events" + (" WHERE run_id = ?" if run_id else "") + " ORDER BY seq"
        return [dict(r) for r in self.db.execute(q, (run_id,) if run_id else ())]

    def is_stale(self, row: dict[str, Any], now: float | None = None) -> bool:
        """A 'running' row whose worker is gone: dead process on this host, or a silent heartbeat."""
        if row["status"] != "running":
            return False
        now = time.time() if now is None else now
        if row["host"] == hostname() and not process_alive(row["pid"], row["pid_start"]):
            return True
        return row["heartbeat"] is None or now - row["heartbeat"] > self.stale_after

    # ------------------------------------------------------------------ the claim protocol
    def claim(self, run_id: str, *, pid: int | None = None, job_id: str | None = None,
              retry_failed: bool = True) -> str:
        """Atomically take a run: returns 'claimed', or why not: 'done', 'busy' (a live worker has it),
        'failed' (when ``retry_failed`` is False) or 'missing' (no such row)."""
        pid = os.getpid() if pid is None else pid
        with self._write() as db:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                return "missing"
            row = dict(row)
            if row["status"] == "done":
                return "done"
            if row["status"] == "failed" and not retry_failed:
                return "failed"
            reclaimed = False
            if row["status"] == "running":
                if not self.is_stale(row):
                    return "busy"
                reclaimed = True
            now = time.time()
            db.execute("UPDATE runs SET status = 'running', attempts = attempts + 1, pid = ?, pid_start = ?, "
                       "host = ?, heartbeat = ?, started = ?, finished = NULL, error = NULL, job_id = ? WHERE id = ?",
                       (pid, process_start(pid), hostname(), now, now, job_id, run_id))
            self._event(run_id, "claim", pid, {"reclaimed_from": row["pid"], "host": row["host"]} if reclaimed else None)
        return "claimed"

    def heartbeat(self, run_id: str, *, pid: int | None = None) -> bool:
        """Refresh the claim; False when this process no longer owns the run (it was reclaimed)."""
        pid = os.getpid() if pid is None else pid
        cur = self.db.execute("UPDATE runs SET heartbeat = ? WHERE id = ? AND status = 'running' AND pid = ? AND host = ?",
                              (time.time(), run_id, pid, hostname()))
        return cur.rowcount == 1

    def finish(self, run_id: str, status: str, *, pid: int | None = None, metrics: dict[str, Any] | None = None,
               error: str | None = None) -> bool:
        """Close this process's claim as 'done' or 'failed' (False when it was not the owner)."""
        if status not in ("done", "failed"):
            raise ValueError(status)
        pid = os.getpid() if pid is None else pid
        m = metrics or {}
        with self._write() as db:
            now = time.time()
            cur = db.execute(
                "UPDATE runs SET status = ?, finished = ?, seconds = ? - started, error = ?, pid = NULL, heartbeat = NULL, "
                + ", ".join(f"{c} = ?" for c in METRIC_COLUMNS)
                + " WHERE id = ? AND status = 'running' AND pid = ? AND host = ?",
                (status, now, now, error, *[m.get(c) for c in METRIC_COLUMNS], run_id, pid, hostname()))
            if cur.rowcount == 1:
                self._event(run_id, status, pid, {"error": error} if error else None)
            return cur.rowcount == 1

    def release(self, run_id: str, *, pid: int | None = None, reason: str = "interrupted") -> bool:
        """Give a claimed run back (pending): an interrupted worker; the next claim resumes it."""
        pid = os.getpid() if pid is None else pid
        with self._write() as db:
            cur = db.execute("UPDATE runs SET status = 'pending', pid = NULL, heartbeat = NULL, error = ? "
                             "WHERE id = ? AND status = 'running' AND pid = ? AND host = ?",
                             (reason, run_id, pid, hostname()))
            if cur.rowcount == 1:
                self._event(run_id, "release", pid, {"reason": reason})
            return cur.rowcount == 1

    def abandon(self, run_id: str, *, pid: int, error: str) -> bool:
        """Mark failed a run whose worker process ``pid`` died without closing its claim."""
        with self._write() as db:
            cur = db.execute("UPDATE runs SET status = 'failed', pid = NULL, heartbeat = NULL, error = ?, finished = ? "
                             "WHERE id = ? AND status = 'running' AND pid = ?", (error, time.time(), run_id, pid))
            if cur.rowcount == 1:
                self._event(run_id, "crash", pid, {"error": error})
            return cur.rowcount == 1

    def adopt(self, run_id: str, metrics: dict[str, Any] | None = None) -> None:
        """Mark a run done whose folder is complete although the index does not say so (a worker
        that died after writing audit.json, or a rebuilt index). Nothing is re-run."""
        m = metrics or {}
        with self._write() as db:
            row = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None or row["status"] == "done":
                return
            db.execute("UPDATE runs SET status = 'done', pid = NULL, heartbeat = NULL, error = NULL, finished = "
                       "COALESCE(finished, ?), " + ", ".join(f"{c} = ?" for c in METRIC_COLUMNS) + " WHERE id = ?",
                       (time.time(), *[m.get(c) for c in METRIC_COLUMNS], run_id))
            self._event(run_id, "adopt", None, None)

    def reset(self, run_id: str) -> None:
        """Back to pending (e.g. ``--retry-failed``, or a folder that lost its results)."""
        with self._write() as db:
            db.execute("UPDATE runs SET status = 'pending', pid = NULL, heartbeat = NULL WHERE id = ? "
                       "AND status != 'running'", (run_id,))

    def set_job(self, run_id: str, job_id: str) -> None:
        with self._write() as db:
            db.execute("UPDATE runs SET job_id = ? WHERE id = ?", (job_id, run_id))
            self._event(run_id, "submit", None, {"job_id": job_id})


def headline_metrics(audit: Any) -> dict[str, Any]:
    """Clean / robust average and worst-group accuracy (and the worst group) of an AuditReport."""
    agg = audit.main.aggregates()
    return {"clean_avg": agg["clean_acc"]["avg"], "clean_worst": agg["clean_acc"]["worst"],
            "rob_avg": agg["rob_acc"]["avg"], "rob_worst": agg["rob_acc"]["worst"], "rob_gap": agg["rob_acc"]["gap"],
            "worst_class": agg["rob_acc"]["worst_group"]}
