"""``robfair leaderboard``: several models, the same data, attacks and eps; ranked by worst-class robust accuracy."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table as RichTable

from ..errors import ConfigError
from ..inert import term
from ..utils import MAX_BOOTSTRAP, MAX_SEED, parse_eps
from .app import (ARCH_KWARGS_OPTION, ARCH_OPTION, CLASS_MAP_OPTION, MEAN_OPTION, MODEL_DIR_OPTION, PROBE_HELP,
                  PROBE_TOLERANCE_OPTION, STD_OPTION, _Bars, _check_classes, _display_label, _parse_stats, _progress, app,
                  console, load_model_arg, printed_warnings, probe_options)


def _names(models: list[str]) -> list[str]:
    """One display name per model, never two alike: a name several models share (``net.ts`` in two
    folders, ``seed_0 (best.pt)`` of two studies) becomes the shortest end of each file's path that
    tells them apart (``a/net.ts``, ``b/net.ts``), so no two models share a row or are ever grouped as
    seeds of one setting; what is still alike (the same file listed twice) is numbered: ``net.ts (2)``."""
    keys = [m if m.startswith("robustbench:") else str(Path(m).expanduser().resolve()) for m in models]
    labels = [_display_label(m) for m in models]
    out = list(labels)
    for lab in dict.fromkeys(labels):
        idx = [i for i, other in enumerate(labels) if other == lab]
        if len(idx) < 2:
            continue
        parts = {keys[i]: Path(keys[i]).parts for i in idx}  # distinct files only
        for k in range(1, max(map(len, parts.values())) + 1):
            ends = {key: "/".join(p[-k:]) for key, p in parts.items()}
            if len(set(ends.values())) == len(ends):
                break
        if len(parts) > 1:
            for i in idx:
                out[i] = ends[keys[i]]
    used: set[str] = set()
    for i, lab in enumerate(out):  # a path end that equals another model's name: numbered, never merged
        base, k = lab, 2
        while lab in used:
            lab, k = f"{base} ({k})", k + 1
        used.add(lab)
        out[i] = lab
    return out


def _needs_arch(model: str) -> bool:
    """True for weights-only files (a state dict, safetensors): those take the shared --arch."""
    if model.startswith("robustbench:"):
        return False
    from ..models.checkpoint import FORMAT, _torch_load
    from ..models.sources import detect_format

    p = Path(model).expanduser()
    if not p.is_file():
        return False
    kind = detect_format(p)
    if kind == "safetensors":
        return True
    if kind != "torch":
        return False
    obj = _torch_load(p, "cpu")
    return not (isinstance(obj, dict) and obj.get("format") == FORMAT)


@app.command()
def leaderboard(
    models: List[str] = typer.Argument(..., help="Models in any --model form (checkpoint, TorchScript, .pt2, "
                                       "state dict/.safetensors with --arch, robustbench:NAME)."),
    data: str = typer.Option(..., "--data", "-d", help="NAME[:PATH][,limit=N][,per_class=N]: the same samples for every model."),
    eps: str = typer.Option(..., help="Radius for every model, e.g. 8/255."),
    attack: List[str] = typer.Option(["pgd20"], "--attack", "-a", help="Attack; repeat for several (the worst case ranks)."),
    split: str = typer.Option("test", help="test or train."),
    groups: Optional[str] = typer.Option(None, "--groups", help="Rank by the worst protected group instead of class (default: the classes)."),
    arch: Optional[str] = ARCH_OPTION,
    arch_kwargs: Optional[str] = ARCH_KWARGS_OPTION,
    model_dir: Optional[Path] = MODEL_DIR_OPTION,
    mean: Optional[str] = MEAN_OPTION,  # applied to every model that does not normalize itself
    std: Optional[str] = STD_OPTION,
    class_map: Optional[str] = CLASS_MAP_OPTION,
    out: Path = typer.Option(Path("leaderboard.html"), "--out", "-o", help="HTML page; .md and _tables/*.csv beside it."),
    bootstrap: int = typer.Option(1000, min=0, max=MAX_BOOTSTRAP, help="Bootstrap resamples for the worst/gap intervals."),
    batch_size: int = typer.Option(256, min=1),
    device: str = typer.Option("auto"),
    seed: int = typer.Option(0, min=0, max=MAX_SEED, help="Seeds the attacks' random starts (the same for every model)."),
    probe: Optional[str] = typer.Option(None, "--probe", metavar="B", help=PROBE_HELP.format(default="1") +
                                        ", in each model's audit."),
    probe_tolerance: Optional[float] = PROBE_TOLERANCE_OPTION,
    figures: bool = typer.Option(True, "--figures/--no-figures", help="Embed figures (bars, confusion, Pareto)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing page (HTML, Markdown, CSV tables)."),
) -> None:
    """Audit several models under the same attacks and rank them by worst-class robust accuracy (table + HTML page)."""
    from ..audit import audit as run_audit, validate_model
    from ..data import load_dataset
    from ..models import with_normalization
    from ..report.html import write_report
    from ..report.tables import RunEntry, _Stats, leaderboard_table
    from ..report.text import print_probe

    if out.suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"--out {out} must end in .html; the Markdown and CSV files are written beside it")
    if len(models) < 2:
        raise ConfigError("a leaderboard needs at least two models; for one model use `robfair audit`")
    from ..utils import check_image_eps, resolve_device
    from .study import _check_report_out

    _check_report_out(out, overwrite)  # outputs are refused before any model is loaded or attacked
    names = _names(list(models))  # one name per model, none alike (never merged as seeds)
    resolve_device(device)
    eps_value = parse_eps(eps)
    check_image_eps(eps_value, attack)
    budget, tolerance = probe_options(probe, probe_tolerance)
    base = load_dataset(data, split=split, groups=groups)
    loaded = []
    for m in models:  # load (and check) every model before the first attack runs
        use_arch = arch if arch is not None and _needs_arch(m) else None
        net, meta = load_model_arg(m, use_arch, arch_kwargs if use_arch else None, model_dir, None, None)
        spec = meta.get("spec") or {}
        if (mean is not None or std is not None) and spec.get("mean") is None and spec.get("std") is None:
            net = with_normalization(net, _parse_stats(mean, "mean"), _parse_stats(std, "std"))
            meta = {**meta, "normalization": {"mean": mean, "std": std}}
        ds = _check_classes(meta, base, class_map)
        validate_model(net, ds, batch_size=batch_size, device=device)  # its first batch, before any audit runs
        loaded.append((m, net, meta, ds))
    entries = []
    for label, (m, net, meta, ds) in zip(names, loaded):
        with _progress() as p, printed_warnings():  # its warnings are printed below, not logged as well
            rep = run_audit(net, ds, attacks=attack, eps=eps_value, batch_size=batch_size, device=device, seed=seed,
                            probe=budget, probe_tolerance=tolerance, progress=_Bars(p, prefix=f"{label}: "),
                            classes=ds.classes)
        rep.meta["checkpoint"] = m
        rep.meta["model_source"] = meta.get("source")
        rep.meta["class_order"] = meta.get("class_order")
        entries.append(RunEntry(name=label, group=label, audit=rep, config={"data": data, "model": meta.get("source", ""),
                                                               "method": "", "eps": eps_value}))
    stats = _Stats(bootstrap)
    table = leaderboard_table(entries, stats)
    ranked = [next(e for e in entries if e.name == name) for name in table.data["model"]]
    paths = write_report(ranked, out, title="worst-class robustness leaderboard",
                         description=f"{len(ranked)} models on {data} ({split}), attacks {', '.join(attack)} at eps "
                                     f"{eps_value:g}, ranked by worst-class robust accuracy.",
                         n_boot=bootstrap, figures=figures, lead_tables=[table])
    t = RichTable(title=table.title, title_justify="left", show_edge=False, pad_edge=False)  # cells are untrusted text
    for c in table.columns:
        t.add_column(c, justify="left" if c in ("model", "source", "worst class") else "right")
    for row in table.rows:
        t.add_row(*(term(c) for c in row))
    console.print(t)
    console.print(table.note, highlight=False)
    for e in ranked:
        print_probe(console, e.audit, who=e.name)  # the probe's verdict once, then the other warnings
    console.print(f"wrote {term(paths.html)}, {term(paths.markdown)} and {len(paths.tables)} CSV tables", highlight=False)
