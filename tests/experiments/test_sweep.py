"""Sweeps end to end on digits: run folders, skip-complete, resume, kill-and-rerun exactly once,
the Slurm wiring, and every bad input (one line, exit code 2, nothing written)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import yaml

from robfair.cli import main
from robfair.experiments import Store, load_study, sweep
from robfair.experiments.worker import Interrupted, execute


def cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def attempts(run_dir: Path) -> list[dict]:
    p = run_dir / "attempts.jsonl"
    return [json.loads(s) for s in p.read_text().splitlines()] if p.exists() else []


def epochs(run_dir: Path) -> list[int]:
    return [json.loads(s)["epoch"] for s in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def done_study(tmp_path_factory, tiny_copy):
    """A finished 2-run study (standard, pgd-at) with an eps sweep in the audit."""
    root = tmp_path_factory.mktemp("sweep")
    data = tiny_copy()
    data["audit"]["eps_sweep"] = [0.0, 0.1]
    path = root / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    os.environ["OMP_NUM_THREADS"] = "1"
    res = sweep(load_study(path), out=root / "runs", workers=1)
    return path, root / "runs", res


def test_sweep_writes_run_folders_and_index(done_study):
    _, out, res = done_study
    assert [r["status"] for r in res.rows] == ["done", "done"]
    assert (out / "study.yaml").exists() and (out / "index.sqlite").exists()
    for r in res.runs:
        d = r.run_dir
        for f in ("run.yaml", "config.yaml", "metrics.jsonl", "audit.json", "eps_sweep.json", "checkpoints/best.pt"):
            assert (d / f).exists(), f
        audit = json.loads((d / "audit.json").read_text())
        assert audit["meta"]["attacks"] == ["fgsm", "pgd20"] and audit["meta"]["eps"] == 0.1
        sw = json.loads((d / "eps_sweep.json").read_text())
        assert sw["schema"] == "robfair.eps-sweep/2" and sw["eps"] == [0.0, 0.1] and sw["attacks"] == ["fgsm", "pgd20"]
        # the one eps sweep (robfair.auditing.eps_sweep): the audit's clean outcomes, a monotone curve
        wc1 = sw["audits"][1]["reports"]["worst-case"]
        assert wc1["counts"]["clean"] == audit["reports"]["worst-case"]["counts"]["clean"]
        # eps = 0: nothing to attack, robust = clean
        wc0 = sw["audits"][0]["reports"]["worst-case"]["overall"]
        assert wc0["rob_acc"] == wc0["clean_acc"] >= wc1["overall"]["rob_acc"]
        assert [rep["overall"]["rob_acc"] for rep in sw["reports"]] == [wc0["rob_acc"], wc1["overall"]["rob_acc"]]
        row = next(x for x in res.rows if x["id"] == r.name)
        assert row["rob_avg"] == pytest.approx(audit["reports"]["worst-case"]["overall"]["rob_acc"])
        assert row["attempts"] == 1 and row["seconds"] > 0
    with Store(out / "index.sqlite") as s:
        assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_rerun_skips_complete_runs(done_study, capsys):
    path, out, _ = done_study
    before = {d.name: (d / "audit.json").stat().st_mtime_ns for d in out.iterdir() if d.is_dir()}
    code, stdout, err = cli(["sweep", path, "--out", out], capsys)
    assert code == 0, err
    assert "2 runs (2 done, 0 to resume, 0 new)" in stdout
    after = {d.name: (d / "audit.json").stat().st_mtime_ns for d in out.iterdir() if d.is_dir()}
    assert before == after
    for d in out.iterdir():
        if d.is_dir():
            assert [a["event"] for a in attempts(d)] == ["start", "done"]


def test_changed_config_under_the_same_name_is_refused(done_study, capsys, tmp_path):
    path, out, _ = done_study
    data = yaml.safe_load(path.read_text())
    data["base"]["epochs"] = 2
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(data))
    code, stdout, err = cli(["sweep", changed, "--out", out], capsys)
    assert code == 2 and "was made with another config (train.epochs: 1 -> 2)" in err
    assert len(err.strip().splitlines()) == 1


def test_interrupted_run_resumes_from_its_checkpoint(tiny, write_study, tmp_path, monkeypatch):
    import robfair.training as training

    tiny["grid"] = {"method": ["pgd-at"]}
    tiny["base"]["epochs"] = 3
    study = load_study(write_study(tiny))
    out = tmp_path / "runs"
    sweep(study, out=out, dry_run=True)  # plans only: nothing written
    assert not out.exists()
    real_train = training.train

    class StopAfterFirstEpoch:
        def on_epoch_end(self, epoch, record):
            if epoch == 0:
                raise Interrupted("test")

    def interrupted_train(cfg, *, callbacks=(), **kw):
        return real_train(cfg, callbacks=[*callbacks, StopAfterFirstEpoch()], **kw)

    from robfair.experiments.sweep import plan

    (run,) = plan(study, out)  # run this one run in-process, stopped after its first epoch
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "run.yaml").write_text(run.spec.to_yaml())
    index = out / "index.sqlite"
    monkeypatch.setattr(training, "train", interrupted_train)
    assert execute(run.run_dir, index) == "interrupted"
    monkeypatch.setattr(training, "train", real_train)
    with Store(index) as s:
        row = s.get(run.name)
        assert (row["status"], row["attempts"]) == ("pending", 1)
    assert epochs(run.run_dir) == [1] and (run.run_dir / "checkpoints" / "last.pt").exists()
    assert not (run.run_dir / "audit.json").exists()

    res = sweep(study, out=out, workers=1)  # its own process; resumes after epoch 1
    assert res.rows[0]["status"] == "done" and res.rows[0]["attempts"] == 2
    assert epochs(run.run_dir) == [1, 2, 3]
    ev = attempts(run.run_dir)
    assert [a["event"] for a in ev] == ["start", "interrupted", "start", "done"]
    assert ev[2]["resumed_after_epochs"] == 1


@pytest.mark.slow
def test_killed_sweep_rerun_does_every_run_exactly_once(tiny, write_study, tmp_path, capsys):
    tiny["base"]["epochs"] = 20
    tiny["seeds"] = [0, 1]
    path = write_study(tiny)
    out = tmp_path / "runs"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    driver = subprocess.Popen([sys.executable, "-c", "from robfair.cli import main; main()", "sweep", str(path),
                               "--out", str(out), "--workers", "2"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    interrupted_run = None
    t0 = time.time()
    while time.time() - t0 < 240 and interrupted_run is None:
        time.sleep(0.1)
        try:
            rows = sqlite3.connect(out / "index.sqlite").execute("SELECT id, status FROM runs").fetchall()
        except sqlite3.Error:
            continue
        statuses = [s for _, s in rows]
        for name, status in rows:
            m = out / name / "metrics.jsonl"
            if status == "running" and "done" in statuses and m.exists() and 2 <= len(m.read_text().splitlines()) <= 12:
                interrupted_run = name  # mid-training, after another run finished
    assert interrupted_run is not None, "the sweep never reached the state to kill it in"
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    done_before = [n for n, s in sqlite3.connect(out / "index.sqlite").execute("SELECT id, status FROM runs")
                   if s == "done"]
    for _ in range(100):  # workers notice the dead sweep and give their runs back
        busy = sqlite3.connect(out / "index.sqlite").execute("SELECT COUNT(*) FROM runs WHERE status='running'").fetchone()
        if busy[0] == 0:
            break
        time.sleep(0.1)
    assert busy[0] == 0
    code, stdout, err = cli(["sweep", path, "--out", out, "--workers", "2"], capsys)
    assert code == 0, err
    with Store(out / "index.sqlite") as s:
        rows = s.rows()
    assert len(rows) == 4 and all(r["status"] == "done" for r in rows)
    for r in rows:
        d = out / r["id"]
        assert epochs(d) == list(range(1, 21))  # every epoch once in the record
        ev = [a["event"] for a in attempts(d)]
        assert ev.count("done") + ev.count("adopt") == 1, (r["id"], ev)  # exactly one completed training
        assert (d / "audit.json").exists()
        if r["id"] in done_before:
            assert ev == ["start", "done"]  # finished before the kill: never touched again
    ev = attempts(out / interrupted_run)
    assert [a["event"] for a in ev] == ["start", "interrupted", "start", "done"]
    assert ev[1]["reason"] == "the sweep that started this worker is gone"
    assert ev[2]["resumed_after_epochs"] >= 1  # continued from its checkpoint, not from scratch


def test_study_requiring_a_missing_method_is_skipped(tiny, write_study, tmp_path, capsys):
    tiny["requires"] = ["fair-constraint-not-yet"]
    code, stdout, err = cli(["sweep", write_study(tiny), "--out", tmp_path / "runs"], capsys)
    assert code == 0 and "needs method(s) fair-constraint-not-yet" in stdout
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("case", ["unknown-key", "empty-grid", "collision", "bad-method", "slurm-missing",
                                  "tensorboard-missing", "foreign-folder"])
def test_bad_sweep_input(case, tiny, write_study, tmp_path, capsys, monkeypatch):
    out = tmp_path / "runs"
    argv = []
    expect = {"unknown-key": "unknown key 'gird'", "empty-grid": "empty list", "collision": "two runs are named",
              "bad-method": "method 'nope'", "slurm-missing": "pip install submitit",
              "tensorboard-missing": "pip install tensorboard", "foreign-folder": "is not a run of this sweep"}[case]
    if case == "unknown-key":
        tiny["gird"] = {}
    elif case == "empty-grid":
        tiny["grid"] = {"method": []}
    elif case == "collision":
        tiny["grid"] = {}
        tiny["variants"] = [{"name": "a b", "method": "standard"}, {"name": "a_b", "method": "pgd-at"}]
    elif case == "bad-method":
        tiny["grid"] = {"method": ["nope"]}
    elif case == "slurm-missing":
        monkeypatch.setitem(sys.modules, "submitit", None)  # import fails as if not installed
        argv = ["--backend", "slurm"]
    elif case == "tensorboard-missing":
        monkeypatch.setitem(sys.modules, "tensorboard", None)
        argv = ["--tensorboard"]
    elif case == "foreign-folder":
        (out / "method=standard,seed=0").mkdir(parents=True)
        (out / "method=standard,seed=0" / "notes.txt").write_text("mine")
    code, stdout, err = cli(["sweep", write_study(tiny), "--out", out, *argv], capsys)
    assert code == 2
    assert expect in err and len(err.strip().splitlines()) == 1, err
    if case != "foreign-folder":
        assert not out.exists()  # nothing written
    else:
        assert sorted(p.name for p in out.iterdir()) == ["method=standard,seed=0"]


def test_slurm_backend_submits_one_job_array(tiny, write_study, tmp_path, capsys, monkeypatch):
    calls = {}

    class FakeJob:
        def __init__(self, i):
            self.job_id = f"4242_{i}"

    class AutoExecutor:
        def __init__(self, folder):
            calls["folder"] = folder

        def update_parameters(self, **kw):
            calls["params"] = kw

        def map_array(self, fn, *iterables):
            calls["fn"], calls["args"] = fn, [list(x) for x in iterables]
            return [FakeJob(i) for i in range(len(calls["args"][0]))]

    monkeypatch.setitem(sys.modules, "submitit", types.SimpleNamespace(AutoExecutor=AutoExecutor))
    tiny["slurm"] = {"gpus_per_node": 2, "cpus_per_task": 4, "timeout_min": 60, "setup": ["module load cuda"]}
    out = tmp_path / "runs"
    code, stdout, err = cli(["sweep", write_study(tiny), "--out", out, "--backend", "slurm", "--partition", "gpu"], capsys)
    assert code == 0, err
    assert "submitted 2 runs as Slurm job array 4242" in stdout
    p = calls["params"]
    assert (p["slurm_partition"], p["gpus_per_node"], p["cpus_per_task"], p["timeout_min"]) == ("gpu", 2, 4, 60)
    assert p["slurm_setup"] == ["module load cuda"]
    from robfair.experiments.backends import slurm_entry

    assert calls["fn"] is slurm_entry
    assert calls["args"][0] == [str(out / "method=standard,seed=0"), str(out / "method=pgd-at,seed=0")]
    with Store(out / "index.sqlite", wal=False) as s:
        rows = s.rows()
        assert [r["job_id"] for r in rows] == ["4242_0", "4242_1"] and all(r["status"] == "pending" for r in rows)
        assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # no WAL on cluster file systems
    assert not (out / "method=standard,seed=0" / "audit.json").exists()  # nothing ran here


def test_report_over_the_sweep(done_study, tmp_path, capsys):
    _, out, _ = done_study
    html = tmp_path / "tiny.html"
    code, stdout, err = cli(["report", out, "--out", html, "--no-figures"], capsys)
    assert code == 0, err
    md = html.with_suffix(".md").read_text()
    assert md.startswith("## tiny") and "a tiny study for the tests" in md
    summary = md.split("### Average and worst-class accuracy")[1].split("###")[0]
    rows = [line.split("|")[1].strip() for line in summary.splitlines() if line.startswith("| method=")]
    assert rows == ["method=standard", "method=pgd-at"]  # the study's order, not alphabetical
    assert "### Robust accuracy vs eps" in md
    eps_csv = (tmp_path / "tiny_tables" / "eps.csv").read_text().splitlines()
    assert len(eps_csv) == 1 + 2 * 2 * 10  # 2 runs x 2 radii x 10 classes


def test_the_worker_audits_with_the_study_probe_and_records_it(tiny, write_study, tmp_path):
    """The study's ``audit: {probe: 2x, probe_tolerance: 0.03}`` reaches the run's audit
    (audit.json's ``probe``) and its config.yaml (the final audit's keys of its TrainConfig)."""
    from robfair.experiments.sweep import plan

    tiny["grid"] = {"method": ["standard"]}
    tiny["base"]["eps"] = 0.02  # most test samples survive FGSM: the probe has samples to attack
    tiny["audit"].update(attacks=["fgsm"], probe="2x", probe_tolerance=0.03)
    study = load_study(write_study(tiny))
    (run,) = plan(study, tmp_path / "runs")
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "run.yaml").write_text(run.spec.to_yaml())
    assert execute(run.run_dir) == "done"
    rec = json.loads((run.run_dir / "audit.json").read_text())["probe"]
    assert rec["budget"] == "2x" and rec["tolerance"] == pytest.approx(0.03) and rec["overall"]["first_attacked"] > 0
    cfg = yaml.safe_load((run.run_dir / "config.yaml").read_text())
    assert (cfg["probe"], cfg["probe_tolerance"]) == (2.0, 0.03)
