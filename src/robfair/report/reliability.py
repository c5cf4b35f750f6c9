"""The reliability probe's record (``AuditReport.probe``, audit.json ``"probe"``) as the terminal and
the HTML report show it: its one verdict line and how it came out, the groups it flags with the
corrected estimate, and the audit's warnings once the verdict (and AutoAttack's own flags) are
shown on their own.

Every record audit.json has held is read: the current one (``design`` ``"sampled"`` or
``"in-audit"``, see docs/audit-json.md), ``{"skipped": reason}``, and the older per-group-test
record (``p``, ``p_holm``, ``autoattack_robust_acc``, ``per_group_max``; its verdict was a warning).
Nothing here computes a statistic: the numbers are the record's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence


PASSED, FLAGGED, SKIPPED, OPEN = "passed", "flagged", "skipped", "inconclusive"
#: the terminal's and the page's mark of a flagged group
MARK = "!"
_PREFIX = "reliability probe"


def _verdict(rec: dict[str, Any]) -> str:
    from ..auditing.probe import verdict  # lazy: start-up time (the probe's module imports torch; the page needs none)

    return verdict(rec)


def kind(rec: Mapping[str, Any] | None) -> str | None:
    """``"older"`` (the per-group-test record), ``"skipped"``, ``"sampled"``, ``"in-audit"``; None
    without a record."""
    if not isinstance(rec, Mapping):
        return None
    if "skipped" in rec:
        return SKIPPED
    if rec.get("design") in ("sampled", "in-audit"):
        return rec["design"]
    return "older"


def _older_line(rec: Mapping[str, Any], warnings: Sequence[str]) -> str:
    said = next((w for w in warnings if str(w).startswith(_PREFIX)), None)
    if said is not None:
        return str(said)
    flagged = list(rec.get("flagged_groups") or [])
    size = f"AutoAttack on up to {rec['per_group_max']} samples per group, " if "per_group_max" in rec else ""
    found = f"flagged {', '.join(map(str, flagged))}" if flagged else "no group flagged"
    return f"{_PREFIX} (an older audit.json: {size}exact one-sided tests, Holm-adjusted): {found}"


def verdict_line(rec: Mapping[str, Any] | None, warnings: Sequence[str] = ()) -> str | None:
    """The probe's one line (``rec["verdict"]``; for a skipped or an older record, the line it gets:
    an older record's verdict is the warning it left, if any); None without a record."""
    k = kind(rec)
    if k is None:
        return None
    if k == SKIPPED:
        return _verdict(dict(rec))
    if k == "older":
        return _older_line(rec, warnings)
    return str(rec.get("verdict") or _verdict(dict(rec)))


def status(rec: Mapping[str, Any] | None) -> str | None:
    """How it came out: ``"flagged"`` (a group overstated beyond the tolerance), ``"passed"``,
    ``"skipped"``, or ``"inconclusive"`` (nothing was attacked: the budget did not cover one
    sample, or no sample is robust); None without a record."""
    k = kind(rec)
    if k is None:
        return None
    if k == SKIPPED:
        return SKIPPED
    if k == "older":
        return FLAGGED if rec.get("flagged_groups") else PASSED
    if not rec.get("passed", True):
        return FLAGGED
    if k == "in-audit" or str(rec.get("verdict", "")).startswith(f"{_PREFIX}: passed"):
        return PASSED
    return OPEN


@dataclass(frozen=True)
class Flag:
    """A flagged group: ``why`` in words (one short cell), and for the sampled probe the corrected
    robust accuracy with its interval (fractions; None in-audit or for an older record, whose
    flag is a test, not an interval)."""

    group: str
    why: str
    corrected: tuple[float, float, float] | None = None


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def flags(rec: Mapping[str, Any] | None) -> dict[str, Flag]:
    """The groups the probe flags, in the record's order. Sampled: the audit overstates them;
    in-audit: a weaker attack alone overstates them relative to AutoAttack (exact; the audit's
    worst case includes AutoAttack); older record: its Holm-adjusted test rejected."""
    k = kind(rec)
    out: dict[str, Flag] = {}
    if k == "sampled":
        for g, r in rec["per_group"].items():
            if r.get("flagged"):
                out[str(g)] = Flag(str(g), f"overstated by {_pct(r['overstatement'])} [>= {_pct(r['lower'])}] points",
                                   (r["corrected_robust_acc"], r["corrected_lo"], r["corrected_hi"]))
    elif k == "in-audit":
        for atk, a in rec.get("per_attack", {}).items():
            for g in a.get("flagged_groups", []):
                r = a["per_group"][g]
                prev = out.get(str(g))
                why = f"{atk} +{_pct(r['overstatement'])}"
                out[str(g)] = Flag(str(g), f"{prev.why}, {why}" if prev else why)
    elif k == "older":
        for g in rec.get("flagged_groups") or []:
            r = (rec.get("per_group") or {}).get(g, {})
            p = r.get("p_holm")
            out[str(g)] = Flag(str(g), "AutoAttack found more errors" + (f" (Holm p = {p:.2g})" if isinstance(p, (int, float)) else ""))
    return out


def autoattack_flags(rec: Mapping[str, Any] | None) -> list[str]:
    """AutoAttack's own verdicts the record kept (``autoattack: ...``), once each."""
    if kind(rec) in ("sampled", "in-audit"):
        return list(dict.fromkeys(str(f) for f in rec.get("autoattack_flags") or []))
    return []


def _text(w: str) -> str:
    """A warning without its ``[attack] `` source."""
    return w.split("] ", 1)[1] if w.startswith("[") and "] " in w else w


def other_warnings(rec: Mapping[str, Any] | None, warnings: Sequence[str], *, drop_flags: bool = False) -> list[str]:
    """The audit's warnings, once each, without the probe's verdict (shown on its own line) and,
    with ``drop_flags``, without AutoAttack's own flags (where they are shown with the verdict)."""
    line = verdict_line(rec, warnings)
    aa = set(autoattack_flags(rec)) if drop_flags else set()
    return [w for w in dict.fromkeys(map(str, warnings)) if w != line and _text(w) not in aa]


def legend(rec: Mapping[str, Any] | None) -> str | None:
    """One line under a group table explaining the mark (None when no group is flagged)."""
    if not flags(rec):
        return None
    k = kind(rec)
    tol = rec.get("tolerance")
    beyond = f"by more than {_pct(tol)} points" if isinstance(tol, (int, float)) else "significantly"
    if k == "sampled":
        label = " + ".join(rec.get("compared_with") or []) or "the audit"
        return (f"{MARK} flagged by the reliability probe: {label} overstates this group's robust accuracy {beyond} "
                f"(95%, every statement at once); AutoAttack-corrected robust %: the probe's estimate [95% interval]")
    if k == "in-audit":
        return (f"{MARK} a weaker attack alone overstates this group's robust accuracy {beyond} relative to "
                f"{rec.get('attack', 'AutoAttack')} (exact, the same samples); the table's numbers include "
                f"{rec.get('attack', 'AutoAttack')}")
    return f"{MARK} flagged by the reliability probe (an older audit.json: Holm-adjusted exact tests at 5%)"


__all__ = ["kind", "verdict_line", "status", "Flag", "flags", "autoattack_flags", "other_warnings", "legend", "MARK",
           "PASSED", "FLAGGED", "SKIPPED", "OPEN"]
