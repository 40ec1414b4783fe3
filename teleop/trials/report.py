"""Trial reports: a table like the thesis's Table 5.3 and a plot like its Fig. 5.18."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _fmt(value, std=None, digits=2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" + (f"±{std:.{digits}f}" if std is not None else "")


def format_table(summary: dict) -> str:
    """Errors vs round trip, with and without compensation: window errors as mean±std over
    the engaged takes, whole-take errors as means over all takes."""
    header = (f"{'RTT [s]':>7s} {'takes':>6s} {'hands comp [cm]':>16s} {'no comp':>11s} {'ratio':>6s} "
              f"{'CoM comp':>10s} {'no comp':>8s} {'posture comp':>13s} {'no comp':>8s} "
              f"{'whole: comp':>12s} {'no comp':>8s} {'wrong task':>10s} {'worst excess':>12s}")
    lines = [header, "-" * len(header)]
    for label, e in summary["rtt"].items():
        c, n = e["comp"], e["nocomp"]
        ratio = (n["hand_cm"] / c["hand_cm"]) if c["hand_cm"] and n["hand_cm"] else None
        lines.append(
            f"{label:>7s} {e['scored_takes']:>3d}/{e['takes']:<2d} {_fmt(c['hand_cm'], c['hand_cm_std']):>16s} "
            f"{_fmt(n['hand_cm'], n['hand_cm_std']):>11s} {_fmt(ratio, digits=1):>6s} {_fmt(c['com_cm']):>10s} "
            f"{_fmt(n['com_cm']):>8s} {_fmt(c['posture_rad'], digits=3):>13s} {_fmt(n['posture_rad'], digits=3):>8s} "
            f"{_fmt(c['whole']['hand_cm']):>12s} {_fmt(n['whole']['hand_cm']):>8s} "
            f"{e.get('wrong_task_engagements', 0):>10d} {_fmt(e.get('worst_excess_cm', {}).get('max')):>12s}")
    lines.append("takes: those averaged (compensation engaged while there was motion left to score) / all; "
                 "hands: per-axis RMS averaged over axes and hands, after compensation engaged and blended in "
                 "(same window without compensation); whole: over the whole take; wrong task: takes on which "
                 "compensation began to blend in with another task, whether it then engaged or fell back; "
                 "worst excess: the most the compensated hand stayed farther off than without compensation "
                 "for 0.2 s in a row [cm], over all takes.")
    link = summary.get("link") or {}
    if link.get("loss"):
        runs = f" in runs of {link['loss_burst']:g} on average" if link.get("loss_burst") else " (independently)"
        lines.append(f"link: {100 * link['loss']:g} % of the commands lost{runs}, seed {link.get('seed')}.")
    lines += _late_engagement_lines(summary)
    lines += _per_task_lines(summary)
    return "\n".join(lines)


def _late_engagement_lines(summary: dict) -> list[str]:
    """Say which round trips left takes out of the window means, and why: engaged after the
    motion had ended, or never engaged (then how many began to blend in and fell back)."""
    lines = []
    for label, e in summary["rtt"].items():
        late = e.get("engaged_late_takes", 0)
        if late:
            lines.append(f"RTT {label} s: {late} take(s) engaged only after the operator's motion had ended "
                         "(nothing left to score); left out of the window means, counted in 'whole'.")
        never = e.get("never_engaged_takes", 0)
        if never and float(label) < _min_round_trip():
            # Not a recognition failure: below it the compensator passes the delayed
            # references through (the RTT 0 of the default sweep said "never had a task
            # probable enough").
            lines.append(f"RTT {label} s: compensation is off below a {_min_round_trip():g} s round trip (the "
                         "delayed references pass through): 'with' is the same as 'without'.")
        elif never:
            abandoned = e.get("abandoned_takes", 0)
            why = ([f"{abandoned} began to blend in and fell back when the motion left the learned distribution"]
                   if abandoned else [])
            if never - abandoned:
                why.append(f"{never - abandoned} never had a task probable enough")
            lines.append(f"RTT {label} s: {never} take(s) never engaged ({'; '.join(why)}); left out of the window "
                         "means, counted in 'whole', 'wrong task' and 'worst excess'.")
    return lines


def _min_round_trip() -> float:
    """The round trip [s] below which the compensator passes the references through."""
    from teleop.prescient.compensator import CompensatorConfig

    return CompensatorConfig().min_round_trip


def _per_task_lines(summary: dict) -> list[str]:
    """Hands per task and round trip (only when the takes are of several tasks)."""
    entries = summary["rtt"]
    tasks = sorted({task for e in entries.values() for task in e.get("per_task", {})})
    if len(tasks) < 2:
        return []
    width = max(12, *(len(t) for t in tasks))
    lines = ["", "hands per task [cm], compensated / without compensation:",
             f"{'task':{width}s} {'':9s}" + "".join(f"{'RTT ' + label + ' s':>18s}" for label in entries)]
    for task in tasks:
        cells = []
        for e in entries.values():
            t = e.get("per_task", {}).get(task)
            cells.append(f"{_fmt(t['hand_cm_comp'])} / {_fmt(t['hand_cm_nocomp'])}" if t else "-")
        takes = max(e.get("per_task", {}).get(task, {}).get("takes", 0) for e in entries.values())
        lines.append(f"{task or '(no task)':{width}s} {takes:3d} takes" + "".join(f"{c:>18s}" for c in cells))
    return lines


def write_take_rows(rows: list[dict], path: Path) -> Path:
    """CSV of :func:`teleop.trials.sweep.take_rows` (one line per take and round trip). A
    figure that was not measured (None, or NaN: never engaged, nothing left to score) is an
    empty cell, one spelling for spreadsheets and pandas alike."""
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["rtt"])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(v) for k, v in row.items()})
    return path


def _cell(value):
    if isinstance(value, float):
        return f"{value:.4g}" if np.isfinite(value) else ""
    return "" if value is None else value


def plot_error_vs_delay(summary: dict, path: Path) -> Path:
    """PNG of the hand error against the round trip (Fig. 5.18), the points in increasing
    round trip (the summary keeps the order given, e.g. ``--rtt 3,0,1.5``)."""
    labels = sorted(summary["rtt"], key=float)
    rtts = np.array([float(x) for x in labels])
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for key, name, style in (("comp", "with compensation", "o-"), ("nocomp", "without", "s--")):
        mean = np.array([summary["rtt"][k][key]["hand_cm"] or np.nan for k in labels], dtype=float)
        std = np.array([summary["rtt"][k][key]["hand_cm_std"] or 0 for k in labels], dtype=float)
        whole = np.array([summary["rtt"][k][key]["whole"]["hand_cm"] or np.nan for k in labels], dtype=float)
        line, = ax.plot(rtts, mean, style, label=f"{name} (after engagement)")
        ax.fill_between(rtts, mean - std, mean + std, color=line.get_color(), alpha=0.15)
        # Open markers: one round trip gives a single point, which a dotted line alone does not draw.
        ax.plot(rtts, whole, ":" + style[0], color=line.get_color(), markerfacecolor="none",
                label=f"{name} (whole take)")
    ax.set_xlabel("round-trip delay [s]")
    ax.set_ylabel("hand error, RMS [cm]")
    ax.set_title("What the operator sees vs what the operator does")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_take(comp, nocomp, path: Path, title: str = "") -> Path:
    """PNG of one take: the operator, the delayed robot and the compensated robot as the
    operator sees them, right hand x / y / z [cm] against robot time [s]; the grey line marks
    where compensation engaged."""
    fig, axes = plt.subplots(3, 1, figsize=(7, 6.5), dpi=110, sharex=True)
    for ax, (signal, name) in zip(axes, ((6, "right hand x"), (7, "right hand y"), (8, "right hand z"))):
        ax.plot(comp.times, 100 * comp.truth[:, signal], "k-", lw=2, label="operator (what they do)")
        ax.plot(nocomp.times, 100 * nocomp.executed[:, signal], "--", label="robot seen, no compensation")
        ax.plot(comp.times, 100 * comp.executed[:, signal], "-", label="robot seen, compensated")
        if comp.engaged_at is not None:
            ax.axvline(comp.engaged_at, color="grey", lw=0.8)
        ax.set_ylabel(f"{name} [cm]", fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("robot time [s]")
    axes[0].legend(fontsize=7)
    axes[0].set_title(f"round trip {comp.rtt:g} s" + (f": {title}" if title else ""), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
