"""The SQLite run index: the claim protocol, stale claims, and two processes claiming at once."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from robfair.experiments.store import Store, process_alive, process_start


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "index.sqlite", stale_after=30)
    for i in range(3):
        s.register(f"r{i}", study="t", group="g", run_dir=tmp_path / f"r{i}", config_hash="h")
    yield s
    s.close()


def test_wal_mode_and_rows(store):
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    rows = store.rows()
    assert [r["id"] for r in rows] == ["r0", "r1", "r2"] and all(r["status"] == "pending" for r in rows)
    store.register("r0", config_hash="h2")  # re-registering keeps the row, updates the hash
    assert store.get("r0")["config_hash"] == "h2" and len(store.rows()) == 3


def test_claim_finish_release(store):
    assert store.claim("r0") == "claimed"
    assert store.claim("r0") == "busy"  # this very process is alive and beats
    assert store.heartbeat("r0")
    assert store.finish("r0", "done", metrics={"rob_avg": 0.5, "rob_worst": 0.1, "worst_class": "cat"})
    row = store.get("r0")
    assert (row["status"], row["attempts"], row["rob_avg"], row["worst_class"]) == ("done", 1, 0.5, "cat")
    assert row["seconds"] >= 0 and row["pid"] is None
    assert store.claim("r0") == "done"
    assert store.claim("r1") == "claimed" and store.release("r1")
    assert store.get("r1")["status"] == "pending" and store.claim("r1") == "claimed"
    assert store.get("r1")["attempts"] == 2
    assert store.finish("r1", "failed", error="boom")
    assert store.claim("r1", retry_failed=False) == "failed"
    assert store.claim("missing") == "missing"
    events = [e["event"] for e in store.events("r1")]
    assert events == ["claim", "release", "claim", "failed"]


def test_dead_worker_is_reclaimed(store):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    pid = p.pid
    start = process_start(pid)
    p.wait()
    assert not process_alive(pid, start)
    assert store.claim("r2", pid=pid) == "claimed"  # on behalf of a process that is gone now
    assert store.is_stale(store.get("r2"))
    assert store.claim("r2") == "claimed"  # taken over at once (same host, dead pid)
    assert store.get("r2")["attempts"] == 2
    ev = store.events("r2")
    assert json.loads(ev[-1]["detail"])["reclaimed_from"] == pid
    assert not store.heartbeat("r2", pid=pid)  # the old owner learns it lost the claim
    assert not store.finish("r2", "done", pid=pid)


def test_silent_heartbeat_on_another_host_is_stale(store):
    assert store.claim("r0") == "claimed"
    store.db.execute("UPDATE runs SET host = 'elsewhere', heartbeat = ? WHERE id = 'r0'", (time.time() - 10,))
    assert store.claim("r0") == "busy"  # fresh enough (stale_after = 30 s)
    store.db.execute("UPDATE runs SET heartbeat = ? WHERE id = 'r0'", (time.time() - 31,))
    assert store.claim("r0") == "claimed"


CLAIMER = textwrap.dedent("""
    import json, random, sys, time
    from robfair.experiments.store import Store
    from pathlib import Path
    path, n, out, go, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), int(sys.argv[5])
    s = Store(path, timeout=60)
    order = list(range(n))
    random.Random(seed).shuffle(order)  # each worker tries every run, in its own order
    Path(out + ".ready").touch()
    while not go.exists():  # the test starts both at once, after both are ready (imports are slow on a busy machine)
        time.sleep(0.001)
    got = []
    for i in order:
        if s.claim(f"run{i}") == "claimed":
            got.append(f"run{i}")
        time.sleep(0.002)
    json.dump(got, open(out, "w"))
""")


def test_two_processes_claim_each_run_exactly_once(tmp_path):
    n = 60
    with Store(tmp_path / "index.sqlite") as s:
        for i in range(n):
            s.register(f"run{i}")
    go = tmp_path / "go"  # both start claiming at the same instant, once both have started
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, str(tmp_path / "index.sqlite"), str(n),
                               str(tmp_path / f"got{k}.json"), str(go), str(k)]) for k in range(2)]
    deadline = time.time() + 120
    while not all((tmp_path / f"got{k}.json.ready").exists() for k in range(2)):
        assert time.time() < deadline and all(p.poll() is None for p in procs), "a claimer did not start"
        time.sleep(0.01)
    go.touch()
    for p in procs:
        assert p.wait(timeout=120) == 0
    got = [set(json.loads((tmp_path / f"got{k}.json").read_text())) for k in range(2)]
    assert not (got[0] & got[1])  # no run claimed twice
    assert got[0] | got[1] == {f"run{i}" for i in range(n)}  # none lost
    with Store(tmp_path / "index.sqlite") as s:
        rows = s.rows()
        assert all(r["status"] == "running" and r["attempts"] == 1 for r in rows)
        assert len({r["pid"] for r in rows}) == 2  # both workers got some
        assert sum(e["event"] == "claim" for e in s.events()) == n
