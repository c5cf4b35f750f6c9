"""``robfair doctor``: the machine and what its hardware runs fast, measured.

It prints the CPU (model, the flags that matter, cores), torch (version, CPU capability, threads, a CUDA
device if any) and the speed probe's measured speed-ups (bf16 / fp16 autocast ÷ fp32, channels_last ÷
NCHW, on the probe's small conv net: :func:`robfair.hardware.measure_speedups`), what robfair does with
each, and where the probe's record is cached. ``--remeasure`` runs the probe again and rewrites it.
"""

from __future__ import annotations

import typer

from .app import app, console, versions_line


def doctor_lines(remeasure: bool = False) -> list[str]:
    """The lines ``robfair doctor`` prints (the probe runs here when nothing is cached)."""
    import os
    import platform

    import torch  # lazy: start-up time

    from .. import hardware  # lazy: start-up time (imports torch)

    rec = hardware.measure_speedups("cpu", refresh=remeasure)
    sp = rec["speedup"]
    env = os.environ.get(hardware.EMULATION_ENV, "").strip() not in ("", "0")
    flags = hardware.flag_precisions("cpu")
    lines = [versions_line(),
             f"CPU: {hardware.cpu_model()} ({platform.machine()}), {os.cpu_count()} logical cores, "
             f"torch threads {torch.get_num_threads()}, torch CPU capability {hardware.cpu_capability()}",
             f"flags that matter: {hardware.flags_text()} (flags for bf16 units: {'yes' if flags.get('bf16') else 'no'}, "
             f"fp16 units: {'yes' if flags.get('fp16') else 'no'}; reported, not decisive)"]
    if torch.cuda.is_available():
        lines.append(f"CUDA: {hardware.describe('cuda')}")
    else:
        lines.append("CUDA: no device")
    how = "from the cache" if rec.get("cached") else f"measured now in {rec.get('probe_s', 0):.2f} s"
    lines.append(f"measured speed-up ÷ fp32 NCHW on the CPU ({rec.get('what', 'probe')}; 1 thread, "
                 f"{rec.get('rounds', '?')} rounds, medians of CPU time; {how}, {rec.get('measured_at', '?')}):")
    for p in ("bf16", "fp16"):
        r = sp.get(p)
        if hardware._faster(r):
            verdict = f"offered: --precision {p}"
        elif env:
            verdict = f"slower than fp32: run anyway ({hardware.EMULATION_ENV}=1 is set)"
        else:
            verdict = f"refused: slower than fp32 (--precision {p} says so in one line; {hardware.EMULATION_ENV}=1 runs it)"
        lines.append(f"  {p} autocast    {'-' if r is None else f'{r:.2f}x':>6}  {verdict}")
    r = sp.get("channels_last")
    verdict = ("on by default for conv nets" if hardware._faster(r)
               else "off by default (NCHW); asking for it runs it with one warning")
    lines.append(f"  channels_last    {'-' if r is None else f'{r:.2f}x':>6}  {verdict}")
    from pathlib import Path

    kept = "" if Path(rec["cache_file"]).is_file() else (" - could not be written there (measured again next time); "
                                                        f"set {hardware.CACHE_ENV} to a writable folder")
    lines.append(f"cache: {rec['cache_file']}{kept} (per CPU model + flags and torch version; robfair doctor --remeasure "
                 f"measures again)")
    return lines


@app.command()
def doctor(remeasure: bool = typer.Option(False, "--remeasure", help="Run the speed probe again and rewrite its "
                                          "cached record.")) -> None:
    """Print the machine (CPU, flags, cores, torch) and its measured speed-ups (bf16 / fp16 autocast and
    channels_last against fp32), with where they are cached."""
    for line in doctor_lines(remeasure):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
