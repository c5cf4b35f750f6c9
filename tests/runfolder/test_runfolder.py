"""robfair.runfolder: one owner of a run's paths, its atomic writes and its repair (no torch)."""

import json
import subprocess
import sys

import pytest

from robfair.runfolder import (RUN_FILES, RunFolder, audit_file, audit_target, examples_path, holds_results,
                               is_run_folder, outcomes_path, read_jsonl, remove_orphan_temps)


def test_paths_of_a_run(tmp_path):
    run = RunFolder(tmp_path / "r")
    assert run.best == tmp_path / "r" / "checkpoints" / "best.pt"
    assert run.last == tmp_path / "r" / "checkpoints" / "last.pt"
    assert (run.config.name, run.run_spec.name, run.metrics.name) == ("config.yaml", "run.yaml", "metrics.jsonl")
    assert run.audit == tmp_path / "r" / "audit.json"
    assert run.outcomes == tmp_path / "r" / "outcomes.npz" and run.examples == tmp_path / "r" / "examples.npz"
    assert {run.audit.name, run.outcomes.name, run.eps_sweep.name, run.attempts.name} <= set(RUN_FILES)
    assert not run.is_run() and not tmp_path.joinpath("r").exists()  # paths only: nothing is created


def test_side_files_of_other_audit_names(tmp_path):
    assert outcomes_path(tmp_path / "audit.json") == tmp_path / "outcomes.npz"
    assert outcomes_path(tmp_path / "audit-test.json") == tmp_path / "audit-test.outcomes.npz"
    assert examples_path(tmp_path / "b.json") == tmp_path / "b.examples.npz"
    assert audit_target(tmp_path / "new") == tmp_path / "new" / "audit.json"
    assert audit_target(tmp_path / "a.json") == tmp_path / "a.json"
    assert audit_file(tmp_path) == tmp_path / "audit.json" and audit_file(tmp_path / "x.json") == tmp_path / "x.json"


def test_repair_drops_torn_and_foreign_lines_and_epochs_ahead_of_last(tmp_path):
    run = RunFolder(tmp_path)
    for e in (1, 2, 3):
        run.append_metrics({"epoch": e, "loss": 0.5 / e})
    with open(run.metrics, "a") as f:
        f.write('["not a record"]\n{"no_epoch": 1}\n{"epoch": 4, "lo')  # what a kill mid-append leaves
    assert [r["epoch"] for r in run.read_metrics()] == [1, 2, 3]  # reading never writes
    assert run.metrics.read_text().endswith('"lo')
    kept = run.repair_metrics(through_epoch=2)
    assert [r["epoch"] for r in kept] == [1, 2]
    assert [json.loads(s)["epoch"] for s in run.metrics.read_text().splitlines()] == [1, 2]
    assert [r["epoch"] for r in run.repair_metrics()] == [1, 2]  # idempotent


def test_repair_of_a_missing_file(tmp_path):
    run = RunFolder(tmp_path / "r")
    assert run.repair_metrics() == [] and not run.metrics.exists()
    run.root.mkdir()
    assert run.repair_metrics(create=True) == [] and run.metrics.read_text() == ""


def test_orphan_temps_of_a_killed_write_are_removed(tmp_path):
    run = RunFolder(tmp_path)
    run.prepare()
    orphans = [run.checkpoints / ".last.pt.ab12cd.tmp", tmp_path / ".metrics.jsonl.x1y2.tmp"]
    keep = [tmp_path / ".hidden.tmp", tmp_path / "notes.tmp"]  # not the pattern atomic_path writes
    for p in orphans + keep:
        p.write_text("x")
    assert sorted(run.remove_orphan_temps()) == sorted(orphans)
    assert all(p.exists() for p in keep) and not any(p.exists() for p in orphans)
    assert remove_orphan_temps(tmp_path / "missing") == []


def test_results_and_markers(tmp_path):
    run = RunFolder(tmp_path / "r")
    run.prepare()  # an empty checkpoints/: a run folder whose first epoch never finished
    assert is_run_folder(run.root) and not holds_results(run.root)
    run.write_text(run.config, "method: standard\n")
    assert not holds_results(run.root)
    run.append_metrics({"epoch": 1})
    assert holds_results(run.root) and holds_results(tmp_path / "r")
    other = RunFolder(tmp_path / "o")
    other.write_json(other.audit, {"nan": float("nan")}, strict=True)
    assert json.loads(other.audit.read_text()) == {"nan": None} and holds_results(other.root)


def test_attempts_log(tmp_path):
    run = RunFolder(tmp_path)
    run.log_attempt("start", resumed_after_epochs=2)
    run.log_attempt("done", seconds=1.5)
    recs = read_jsonl(run.attempts)
    assert [r["event"] for r in recs] == ["start", "done"] and recs[0]["resumed_after_epochs"] == 2
    assert {"time", "pid", "host"} <= set(recs[1])


def test_ground_floor_imports_no_torch():
    code = "import sys, robfair.runfolder, robfair.safeio; print(any(m.split('.')[0] in ('torch', 'numpy') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("module", ["robfair.training.trainer", "robfair.experiments.worker", "robfair.experiments.results",
                                    "robfair.experiments.sweep", "robfair.experiments.compare", "robfair.cli.audit",
                                    "robfair.report.html", "robfair.report.certify", "robfair.cli.certify",
                                    "robfair.safeio"])
def test_run_file_names_are_spelled_once(module):
    """The users of a run folder take its file names from RunFolder, not from string literals."""
    import importlib
    import inspect

    src = inspect.getsource(importlib.import_module(module))
    for name in ('"audit.json"', '"metrics.jsonl"', '"checkpoints"', '"best.pt"', '"last.pt"', '"run.yaml"',
                 '"config.yaml"', '"attempts.jsonl"', '"eps_sweep.json"', '"certify.json"'):
        code_lines = [ln for ln in src.splitlines() if name in ln and not ln.lstrip().startswith(("#", '"""'))
                      and "``" not in ln]
        assert not code_lines, f"{module} spells {name}: {code_lines[0].strip()}"


def test_an_atomic_write_cut_where_its_finally_cannot_run_leaves_no_temporary(tmp_path):
    """A Ctrl-C can land where the writer's own clean-up does not run (in the context manager's exit,
    before it resumes the generator): the temporary is registered and remove_live_temps (at exit, and
    the CLI's boundary) removes it; a finished write leaves nothing registered."""
    from robfair import utils

    target = tmp_path / "best.pt"
    with utils.atomic_path(target) as tmp:
        tmp.write_text("done")
    assert target.read_text() == "done" and not utils._LIVE_TEMPS
    cm = utils.atomic_path(target)
    tmp = cm.__enter__()  # the body ran; the exit that would rename or remove it never comes
    tmp.write_text("half")
    assert tmp.exists() and tmp in utils._LIVE_TEMPS
    utils.remove_live_temps()
    assert not tmp.exists() and not utils._LIVE_TEMPS
    assert target.read_text() == "done" and sorted(p.name for p in tmp_path.iterdir()) == ["best.pt"]
