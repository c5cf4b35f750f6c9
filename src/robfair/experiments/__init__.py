"""Studies, sweeps and the run store: each paper's experiment from one YAML file.

    from robfair.experiments import load_study, sweep, load_runs
    study = load_study("studies/frl-table.yaml")
    result = sweep(study, workers=2)          # resumable; every run exactly once
    entries, _ = load_runs(result.out)        # -> robfair.report.html.write_report(entries, "frl.html")

Modules: ``config`` (StudyConfig, RunSpec, expansion, ``${...}`` references), ``store`` (SQLite
index), ``worker`` (one run in one process), ``backends`` (local processes, Slurm via submitit),
``sweep``, ``results`` (reading run folders), ``compare``, ``fix`` (audit, fine-tune, audit, paired report: ``robfair.fix``; the module keeps its name, so the function is not re-exported here), ``tracking`` (TensorBoard callback).
"""

from .compare import Comparison, compare, load_report
from .fix import FixResult
from .config import AuditSettings, RunSpec, StudyConfig, config_hash, expand, load_study
from .results import load_runs, study_info
from .store import Store
from .sweep import PlannedRun, SweepResult, plan, sweep

__all__ = [
    "AuditSettings", "Comparison", "FixResult", "PlannedRun", "RunSpec", "Store", "StudyConfig", "SweepResult", "compare",
    "config_hash", "expand", "load_report", "load_runs", "load_study", "plan", "study_info", "sweep",
]
