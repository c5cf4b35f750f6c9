"""``robfair leaderboard``: several models, the same data, attacks and eps; ranked by worst-class robust accuracy."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table as RichTable

from ..errors import ConfigError
from ..inert import term
from ..utils import MAX_BOOTSTRAP, MAX_SEED
from .app import _Bars, _progress, app, console, printed_warnings
from .options import (ARCH_KWARGS_OPTION, ARCH_OPTION, CLASS_MAP_OPTION, MEAN_OPTION, MODEL_DIR_OPTION, PROBE_HELP,
                      PROBE_TOLERANCE_OPTION, STD_OPTION, check_classes, display_label, image_radius, load_model_arg,
                      parse_stats, probe_options)


def _names(models: list[str]) -> list[str]:
    """One display name per model, never two alike: a name several models share (``net.ts`` in two
    folders, ``seed_0 (best.pt)`` of two studies) becomes the shortest end of each file's path that
    tells them apart (``a/net.ts``, ``b/net.ts``), so no two models share a row or are ever grouped as
    seeds of one setting; what is still alike (the same file listed twice) is numbered: ``net.ts (2)``."""
    keys = [m if m.startswith("robustbench:") else str(Path(m).expanduser().resolve()) for m in models]
    labels = [display_label(m) for m in models]
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


#: '-' (or nothing) in a per-model --arch / --arch-kwargs: this model takes none
NONE_ARG = "-"


def _per_model(models: list[str], values: list[str], option: str) -> list[Optional[str]] | None:
    """One ``option`` value per model: None for each when the option is absent or given once (the
    shared form, resolved by the caller), the values in order when given once per model (``-``: none),
    else one line saying how many were given and what is accepted."""
    if len(values) <= 1:
        return None
    if len(values) != len(models):
        raise ConfigError(f"{len(models)} models but {len(values)} {option}: give {option} once (for every model "
                          f"that needs it) or once per model, in the models' order ({option} {NONE_ARG} for a model "
                          "that takes none)")
    return [None if v.strip() in ("", NONE_ARG) else v for v in values]


def model_args(positional: list[str], options: list[str], arch: list[str],
               arch_kwargs: list[str]) -> list[tuple[str, Optional[str], Optional[str], bool]]:
    """``(model, --arch, --arch-kwargs, shared)`` per model, checked before any file is read
    (``shared``: the one --arch given for all, which :func:`_needs_arch` applies to the weights-only
    files only, when the models are loaded). Models come as
    arguments or as repeated ``--model`` (not both). ``--arch`` and ``--arch-kwargs`` are each given
    once, for every weights-only file among the models (a state dict, .safetensors: the form
    ``robfair leaderboard a.pt b.ts --arch net.py:Net``), or once per model in the models' order, so
    two widths of one class are compared in one run (``--model a.pt --arch net.py:Net --arch-kwargs
    'width: 16' --model b.pt --arch net.py:Net --arch-kwargs 'width: 32'``; ``-`` for a model that
    takes none)."""
    if positional and options:
        raise ConfigError("give the models either as arguments or as repeated --model, not both")
    models = list(positional or options)
    if len(models) < 2:
        raise ConfigError("a leaderboard needs at least two models; for one model use `robfair audit`")
    archs, kwargs = _per_model(models, arch, "--arch"), _per_model(models, arch_kwargs, "--arch-kwargs")
    shared_arch = arch[0] if len(arch) == 1 and arch[0].strip() not in ("", NONE_ARG) else None
    shared_kwargs = arch_kwargs[0] if len(arch_kwargs) == 1 and arch_kwargs[0].strip() not in ("", NONE_ARG) else None
    out = []
    for i, m in enumerate(models):
        a = archs[i] if archs is not None else shared_arch
        k = kwargs[i] if kwargs is not None else (shared_kwargs if a is not None else None)
        out.append((m, a, k, archs is None and a is not None))
    return out


#: --arch / --arch-kwargs here: the shared options' help, then how they pair with the models
_PER_MODEL = "{} Give it once, for every {} among the models, or once per model in the models' order ('-': none)."


@app.command()
def leaderboard(
    models: Optional[List[str]] = typer.Argument(None, metavar="MODEL", show_default=False,
                                                 help="Models in any --model form (checkpoint, TorchScript, .pt2, "
                                                 "state dict/.safetensors with --arch, robustbench:NAME)  \\[default: "
                                                 "none: give them as --model]"),
    model: Optional[List[str]] = typer.Option(None, "--model", "-m", metavar="MODEL", show_default=False,
                                              help="A model, instead of the arguments; repeat for each, each with its "
                                              "own --arch / --arch-kwargs in the same order  \\[default: none]"),
    data: str = typer.Option(..., "--data", "-d", help="NAME[:PATH][,limit=N][,per_class=N]: the same samples for every model."),
    eps: str = typer.Option(..., help="Radius for every model, e.g. 8/255."),
    attack: List[str] = typer.Option(["pgd20"], "--attack", "-a", help="Attack; repeat for several (the worst case ranks)."),
    split: str = typer.Option("test", help="test or train."),
    groups: Optional[str] = typer.Option(None, "--groups", help="Rank by the worst protected group instead of class (default: the classes)."),
    arch: Optional[List[str]] = typer.Option(None, "--arch", show_default=False, help=_PER_MODEL.format(
        ARCH_OPTION.help, "weights-only file")),
    arch_kwargs: Optional[List[str]] = typer.Option(None, "--arch-kwargs", show_default=False, help=_PER_MODEL.format(
        ARCH_KWARGS_OPTION.help, "--arch")),
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
    from ..auditing import audit as run_audit, validate_model
    from ..data import load_dataset
    from ..models import with_normalization
    from ..report.html import write_report
    from ..report.tables import RunEntry, _Stats, leaderboard_table
    from ..report.text import print_probe

    if out.suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"--out {out} must end in .html; the Markdown and CSV files are written beside it")
    specs = model_args(list(models or []), list(model or []), list(arch or []), list(arch_kwargs or []))
    models = [m for m, _, _, _ in specs]
    from ..utils import resolve_device
    from .study import _check_report_out

    _check_report_out(out, overwrite)  # outputs are refused before any model is loaded or attacked
    names = _names(list(models))  # one name per model, none alike (never merged as seeds)
    resolve_device(device)
    radius = image_radius(eps, attack)  # parsed once; every model's audit takes it as it is
    eps_value = radius.max()
    budget, tolerance = probe_options(probe, probe_tolerance)
    base = load_dataset(data, split=split, groups=groups)
    loaded = []
    for m, use_arch, use_kwargs, shared in specs:  # load (and check) every model before the first attack runs
        if shared and not _needs_arch(m):  # the one --arch is for the weights-only files among the models
            use_arch = use_kwargs = None
        net, meta = load_model_arg(m, use_arch, use_kwargs, model_dir, None, None)
        spec = meta.get("spec") or {}
        if (mean is not None or std is not None) and spec.get("mean") is None and spec.get("std") is None:
            net = with_normalization(net, parse_stats(mean, "mean"), parse_stats(std, "std"))
            meta = {**meta, "normalization": {"mean": mean, "std": std}}
        ds = check_classes(meta, base, class_map)
        validate_model(net, ds, batch_size=batch_size, device=device)  # its first batch, before any audit runs
        loaded.append((m, net, meta, ds))
    entries = []
    for label, (m, net, meta, ds) in zip(names, loaded):
        with _progress() as p, printed_warnings():  # its warnings are printed below, not logged as well
            rep = run_audit(net, ds, attacks=attack, eps=radius, batch_size=batch_size, device=device, seed=seed,
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
                                     f"{eps_value:g}, ranked by worst-class robust accuracy, then average "
                                     "(identical point estimates tie).",
                         n_boot=bootstrap, figures=figures, lead_tables=[table])
    t = RichTable(title=table.title, title_justify="left", show_edge=False, pad_edge=False)  # cells are untrusted text
    for c in table.columns:
        t.add_column(c, justify="left" if c in ("model", "reliability", "source", "worst class") else "right")
    for row in table.rows:
        t.add_row(*(term(c) for c in row))
    console.print(t)
    console.print(table.note, highlight=False)
    for e in ranked:
        print_probe(console, e.audit, who=e.name)  # the probe's verdict once, then the other warnings
    console.print(f"wrote {term(paths.html)}, {term(paths.markdown)} and {len(paths.tables)} CSV tables", highlight=False)
