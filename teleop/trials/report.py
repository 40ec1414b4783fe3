"""Trial reports: a table like the thesis's Table 5.3 and a plot like its Fig. 5.18."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from retarget.references import SIGNAL_SLICES  # noqa: E402
from teleop.wording import listed  # noqa: E402


def _fmt(value, std=None, digits=2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" + (f"±{std:.{digits}f}" if std is not None else "")


def format_table(summary: dict) -> str:
    """Errors vs round trip, with and without compensation: window errors as mean±std over
    the engaged takes, whole-take errors as means over all takes."""
    header = (f"{'RTT [s]':>7s} {'takes':>6s} {'hands comp [cm]':>16s} {'no comp':>11s} {'ratio':>6s} "
              f"{'CoM comp [cm]':>14s} {'no comp':>8s} {'posture comp [rad]':>19s} {'no comp':>8s} "
              f"{'whole: comp [cm]':>17s} {'no comp':>8s} {'wrong task':>11s} {'worst excess [cm]':>18s}")
    lines = [header, "-" * len(header)]
    for label, e in summary["rtt"].items():
        c, n = e["comp"], e["nocomp"]
        ratio = (n["hand_cm"] / c["hand_cm"]) if c["hand_cm"] and n["hand_cm"] else None
        lines.append(
            f"{label:>7s} {e['scored_takes']:>3d}/{e['takes']:<2d} {_fmt(c['hand_cm'], c['hand_cm_std']):>16s} "
            f"{_fmt(n['hand_cm'], n['hand_cm_std']):>11s} {_fmt(ratio, digits=1):>6s} {_fmt(c['com_cm']):>14s} "
            f"{_fmt(n['com_cm']):>8s} {_fmt(c['posture_rad'], digits=3):>19s} {_fmt(n['posture_rad'], digits=3):>8s} "
            f"{_fmt(c['whole']['hand_cm']):>17s} {_fmt(n['whole']['hand_cm']):>8s} "
            f"{e.get('wrong_task_engagements', 0):>11d} {_fmt(e.get('worst_excess_cm', {}).get('max')):>18s}")
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
            # Name only the columns that show a figure: with every command lost, 'whole' and
            # 'worst excess' show '-' (nothing measured), and the note said they counted them.
            shown = [name for name, value in (("whole", e["comp"]["whole"].get("hand_cm")),
                                              ("wrong task", e.get("wrong_task_engagements", 0)),
                                              ("worst excess", e.get("worst_excess_cm", {}).get("max")))
                     if value is not None]
            counted = (f"counted in {_quoted(shown)}" if shown else "")
            blank = [name for name in ("whole", "worst excess") if name not in shown]
            if blank:
                counted += (("; " if counted else "") + f"{_quoted(blank)} "
                            f"{'show' if len(blank) > 1 else 'shows'} '-': nothing measured")
            lines.append(f"RTT {label} s: {never} take(s) never engaged ({'; '.join(why)}); left out of the window "
                         f"means, {counted}.")
    return lines


def _quoted(names: list[str]) -> str:
    """'a', 'b' and 'c'."""
    return listed([f"'{name}'" for name in names])


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


def _value(entry: dict, key: str) -> float:
    """``entry[key]`` as a float, NaN for None (a 0.0 is a value: at RTT 0 the error is 0)."""
    value = entry.get(key)
    return float("nan") if value is None else float(value)


def error_vs_delay_series(summary: dict) -> tuple[np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The points of :func:`plot_error_vs_delay`: (R,) round trips [s] in increasing order
    (the summary keeps the order given, e.g. ``--rtt 3,0,1.5``), and per "comp" / "nocomp"
    the (R,) window hand errors [cm] (mean over the takes, NaN where none was scored) and
    their (R,) std (0 where unknown). Below the compensator's minimum round trip nothing
    engages, so there is no window: the references pass through, and the whole take's
    error is the point, both ways (a 0.0 is a value there, not a missing one)."""
    labels = sorted(summary["rtt"], key=float)
    rtts = np.array([float(x) for x in labels])
    series = {}
    for key in ("comp", "nocomp"):
        entries = [summary["rtt"][label][key] for label in labels]
        mean = np.array([_value(e, "hand_cm") for e in entries])
        std = np.nan_to_num(np.array([_value(e, "hand_cm_std") for e in entries]))
        off = (rtts < _min_round_trip()) & np.isnan(mean)
        mean[off] = [_value(e["whole"], "hand_cm") for e, o in zip(entries, off) if o]
        series[key] = (mean, std)
    return rtts, series


def plot_error_vs_delay(summary: dict, path: Path) -> Path:
    """PNG of the hand error against the round trip (Fig. 5.18), the points of
    :func:`error_vs_delay_series`: mean ± std over the takes, the bar clipped at 0 (an RMS
    is not negative). The whole-take errors are in the table, not here: their padding
    grows with the round trip, so they do not compare across round trips."""
    rtts, series = error_vs_delay_series(summary)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    # Two series at one or two round trips would sit on each other: set them a little apart.
    spread = 0.0 if len(rtts) > 2 else 0.02 * max(1.0, float(np.ptp(rtts)) or 1.0)
    for shift, (key, name, style) in zip((-spread, spread), (("comp", "with compensation", "o-"),
                                                             ("nocomp", "without compensation", "s--"))):
        mean, std = series[key]
        below = mean - np.maximum(mean - std, 0.0)
        ax.errorbar(rtts + shift, mean, yerr=[below, std], fmt=style, capsize=4, elinewidth=1,
                    label=f"{name} (bars: ± 1 std over the takes)")
    ax.set_xlabel("round-trip delay [s]")
    ax.set_ylabel("hand error after engagement, RMS [cm]")
    ax.set_title("What the operator sees vs what the operator does", fontsize=10)
    ax.set_ylim(bottom=0.0)
    if len(rtts) == 1:
        ax.set_xlim(rtts[0] - 0.5, rtts[0] + 0.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _hand_to_plot(comp) -> tuple[slice, str]:
    """The hand (its slice of the references, its name) that is farthest off with
    compensation over the scored ticks: the one that sets the worst excess in the title."""
    distance = comp.hands_distance_cm()[comp.valid_mask(0.0)]     # (K, left/right)
    left = len(distance) > 0 and float(distance[:, 0].max()) > float(distance[:, 1].max())
    return (SIGNAL_SLICES["left_hand"], "left hand") if left else (SIGNAL_SLICES["right_hand"], "right hand")


def plot_take(comp, nocomp, path: Path, title: str = "") -> Path:
    """PNG of one take, as the operator sees it: on top, the hand distance [cm] between what
    the robot shows and what the operator does (the farther of the two hands, the measure of
    the worst excess), with and without compensation; below, that hand's x / y / z [cm] for
    the operator, the delayed robot and the compensated robot, against robot time [s]. The
    grey line marks where compensation engaged."""
    hand, hand_name = _hand_to_plot(comp)
    fig, axes = plt.subplots(4, 1, figsize=(7, 8), dpi=110, sharex=True,
                             gridspec_kw={"height_ratios": [1.2, 1, 1, 1]})
    top = axes[0]
    top.plot(nocomp.times, nocomp.hand_distance_cm(), "--", color="C0", label="no compensation")
    top.plot(comp.times, comp.hand_distance_cm(), "-", color="C1", label="compensated")
    top.set_ylabel("hand off by [cm]", fontsize=8)
    top.set_ylim(bottom=0.0)
    rows = [(hand.start + axis, f"{hand_name} {name}") for axis, name in enumerate("xyz")]
    for ax, (signal, name) in zip(axes[1:], rows):
        ax.plot(comp.times, 100 * comp.truth[:, signal], "k-", lw=2, label="operator (what they do)")
        ax.plot(nocomp.times, 100 * nocomp.executed[:, signal], "--", color="C0", label="robot seen, no compensation")
        ax.plot(comp.times, 100 * comp.executed[:, signal], "-", color="C1", label="robot seen, compensated")
        ax.set_ylabel(f"{name} [cm]", fontsize=8)
    for ax in axes:
        if comp.engaged_at is not None:
            ax.axvline(comp.engaged_at, color="grey", lw=0.8, label="compensation engaged")
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    axes[-1].set_xlabel("robot time [s]")
    top.legend(fontsize=7, loc="upper left")
    axes[1].legend(fontsize=7, loc="upper left")
    rms = (f"hands RMS after engagement {comp.window.get('hand_cm', float('nan')):.1f} cm compensated, "
           f"{nocomp.window.get('hand_cm', float('nan')):.1f} cm without") if comp.window else ""
    fig.suptitle(f"round trip {comp.rtt:g} s" + (f": {title}" if title else "") + (f"\n{rms}" if rms else ""),
                 fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
