"""Tables (ours side by side with the reference's, §4.1 Figs. 4.2–4.8) and plots of the
error over time, plus the JSON export tree of the reference (Fig. 3.8)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

from teleop.json_safe import dumps
from teleop.tuning.experiment import COLUMNS, OPTIMISER
from teleop.tuning.heuristics import HEURISTICS, REFERENCE_LABELS

#: The reference's result tables (A7: Figs. 4.2, 4.4, 4.6, 4.8): label -> AE-A, AE-S, OS, ST5, R50.
REFERENCE_TABLES: dict[int, dict[str, tuple[float, ...]]] = {
    1: {"Manual": (4.59, 2.2, 14.96, 2.45, 0.72), "Classic": (9.41, 3.66, 8.55, 5.53, 1.35),
        "No Overshoot": (14.35, 6.57, 15.45, 9.5, 2.67), "P-Control": (15.23, 8.39, 47.44, 12.08, 0.68),
        "PD-Control": (8.39, 3.01, 1.07, 3.62, 1.38), "Pessen": (10.63, 3.9, 9.59, 6.22, 1.47),
        "PI-Control": (25.04, 13.74, 73.08, 14.45, 1.18), "Some Overshoot": (14.53, 6.58, 15.39, 9.77, 2.75)},
    2: {"Manual": (3.74, 2.27, 12.19, 1.71, 0.82), "Classic": (7.46, 3, 11.69, 3.71, 1.03),
        "No Overshoot": (13.35, 5.1, 11.85, 7.85, 1.76), "P-Control": (3.84, 3.17, 29.06, 7.91, 0.75),
        "PD-Control": (6.56, 2.49, 1.05, 2.22, 1.02), "Pessen": (8.46, 3.09, 12.21, 5.2, 1.1),
        "PI-Control": (5.89, 4.29, 41.64, 9.9, 0.73), "Some Overshoot": (13.15, 4.99, 11.21, 8.14, 1.78)},
    3: {"Manual": (4.74, 3.12, 24.18, 2.31, 1.04), "Classic": (8.72, 3.72, 8.04, 5.71, 1.26),
        "No Overshoot": (14.25, 5.83, 11.43, 8.57, 2.25), "P-Control": (10.56, 4.67, 38.17, 7.58, 0.89),
        "PD-Control": (7.78, 3.05, 0.69, 2.82, 1.23), "Pessen": (9.71, 3.76, 8.98, 5.86, 1.39),
        "PI-Control": (15.23, 9.76, 56.93, 12.37, 1.5), "Some Overshoot": (14.07, 5.66, 11.04, 8.45, 2.17)},
    4: {"Manual": (4.11, 2.04, 6.7, 1.29, 0.76), "Classic": (9.51, 4.04, 14.76, 6.68, 1.34),
        "No Overshoot": (14.33, 7.48, 11.31, 9.09, 4.01), "P-Control": (3.12, 2.95, 27.58, 6.76, 0.74),
        "PD-Control": (8.36, 4.09, 16.28, 4.47, 1.37), "Pessen": (10.28, 4.36, 22.44, 7.23, 1.29),
        "PI-Control": (3.54, 3.88, 36.8, 8.38, 0.75), "Some Overshoot": (14.51, 7.08, 11.62, 10.89, 1.96)},
}


def _fmt(value: float | None, width: int = 6) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.2f}"


#: The unit of each column of the table: errors and overshoot in degrees, times in seconds.
COLUMN_UNITS = {"AE-A": "deg", "AE-S": "deg", "OS": "deg", "ST5": "s", "R50": "s"}


def format_setup_table(result: dict) -> str:
    """Our rows next to the reference's for one setup: ``ours | reference`` per column."""
    number = result["setup"]
    ref = REFERENCE_TABLES.get(number, {})
    head = f"Setup {number}: {result['name']}\n"
    head += f"{'method':<20}" + "".join(f"{f'{c} [{COLUMN_UNITS[c]}]':>15}" for c in COLUMNS) + "\n"
    head += f"{'':<20}" + "".join(f"{'ours |   ref':>15}" for _ in COLUMNS) + "\n"
    lines = [head.rstrip("\n")]
    extra = [m for m in result["rows"] if m not in HEURISTICS and m != OPTIMISER]
    for method in list(HEURISTICS) + extra + [OPTIMISER]:
        if method not in result["rows"]:
            continue
        row = result["rows"][method]
        ref_row = ref.get(REFERENCE_LABELS.get(method, ""), None)
        cells = [f"{_fmt(row[c])} |{_fmt(None if ref_row is None else ref_row[i])}" for i, c in enumerate(COLUMNS)]
        lines.append(f"{method:<20}" + "".join(f"{c:>15}" for c in cells))
    if "Manual" in ref:
        lines.append(f"{'(reference Manual)':<20}" + "".join(f"{'- |' + _fmt(v):>15}" for v in ref["Manual"]))
    lines.append("(ST5: when the error last left ±5° during a step's hold, the reference's definition: a controller "
                 "that never settles scores about the hold's length)")
    t = result.get("target")
    if t:
        # A negative improvement is an AE-A above the best rule's ("-39% below" read like a gain).
        improvement = t["ae_improvement"]
        change = ("not comparable with" if improvement is None else     # the best rule tracks without error
                  f"{100 * abs(improvement):.0f}% {'below' if improvement >= 0 else 'above'}")
        lines.append(f"target: Optimiser AE-A {change} the best heuristic "
                     f"({t['best_heuristic']}) [{'ok' if t['ae_ok'] else 'MISSED'}: >= 30%], "
                     f"OS <= 5° [{'ok' if t['os_ok'] else 'MISSED'}], "
                     f"ST5 <= {t['best_heuristic']}'s [{'ok' if t['st5_ok'] else 'MISSED'}] "
                     f"(<= best ST5 of any heuristic: {'yes' if t['st5_vs_best_any_ok'] else 'no'}) "
                     f"-> {'MET' if t['met'] else 'NOT MET'}")
    return "\n".join(lines)


def best_per_column(rows: dict[str, dict]) -> dict[str, str]:
    """Best heuristic (lowest value) per column, ignoring the optimiser."""
    out = {}
    for c in COLUMNS:
        cands = {m: r[c] for m, r in rows.items() if m in HEURISTICS and r[c] is not None}
        out[c] = min(cands, key=cands.__getitem__) if cands else "-"
    return out


def format_report(results: dict[int, dict]) -> str:
    """The printed report of :func:`teleop.tuning.experiment.run_experiment`'s ``results``:
    each setup's table (:func:`format_setup_table`; errors and OS in degrees, times in
    seconds), then the best heuristic per column, ours vs the reference's."""
    parts = [format_setup_table(results[n]) for n in sorted(results)]
    parts.append("Best heuristic per column, ours vs the reference's (A7 'best automatic heuristic'):")
    for n in sorted(results):
        ours = best_per_column(results[n]["rows"])
        ref = REFERENCE_TABLES.get(n, {})
        ref_rows = {m: dict(zip(COLUMNS, ref[REFERENCE_LABELS[m]])) for m in HEURISTICS if REFERENCE_LABELS[m] in ref}
        theirs = best_per_column(ref_rows) if ref_rows else {}
        parts.append(f"  setup {n}: " + ", ".join(f"{c} {ours[c]} / {theirs.get(c, '-')}" for c in COLUMNS))
    return "\n".join(parts)


def json_summary(results: dict[int, dict]) -> dict:
    """{"setups": {"1": {"name", "rows": {method: {AE-A, AE-S, OS, ST5, R50}}, "target"}}}."""
    return {"setups": {str(n): {"name": r["name"], "rows": r["rows"], "target": r.get("target"),
                                "gains": r["gains"], "relay": r["relay"],
                                "optimiser": {k: v for k, v in r.get("optimiser", {}).items() if k != "history"}}
                       for n, r in sorted(results.items())}}


def save_outputs(results: dict[int, dict], out: Path) -> list[Path]:
    """Write the reference's export tree (Fig. 3.8) per setup and method: gains, step data of
    every joint and motion, evaluations; the error plot of each setup (:func:`plot_errors`);
    and summary.json, as one set (:func:`teleop.output_set.write_outputs_together`): an
    interrupted or failed save (a full disk) leaves the previous run's files as they were.
    Written one after another, a Ctrl-C left a summary whose gains were not those of the
    files beside it, and a full disk a truncated recording. Returns the files written."""
    from teleop.output_set import write_outputs_together
    from teleop.tuning.gains_io import save_gains
    from teleop.tuning.pid import PidGains

    def text(content: str) -> Callable[[Path], object]:
        return lambda tmp: tmp.write_text(content)

    writers: dict[Path, Callable[[Path], object]] = {}
    for n, r in results.items():
        for method, recs in r["recordings"].items():
            folder = out / f"setup{n}" / method
            gains = {j: PidGains(**g) for j, g in r["gains"][method].items()}
            writers[folder / "gains.json"] = functools.partial(save_gains, gains=gains)
            writers[folder / "evaluation.json"] = text(dumps(r["evaluations"][method], indent=1))
            for rec in recs:
                writers[folder / f"{rec.motion}.json"] = rec.save
        writers[out / f"setup{n}_errors.png"] = functools.partial(plot_errors, r)
    writers[out / "summary.json"] = text(dumps(json_summary(results), indent=1))
    write_outputs_together(writers)
    return list(writers)


def earlier_run(out: Path) -> dict[int, set[str]] | None:
    """What an earlier run wrote in ``out``, as its ``summary.json`` (from :func:`save_outputs`)
    lists it: {setup number: its methods}; None when there is no ``summary.json``.

    Raises:
        ValueError: ``out/summary.json`` is not such a summary (another tool's file).
    """
    path = out / "summary.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        setups = data["setups"]
        # The methods of its setup<N>/<method>/ folders: the rows and the gains it saved.
        return {int(n): set(setup["rows"]) | set(setup.get("gains") or {}) for n, setup in setups.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise ValueError(f"{path} was not written by teleop tune") from None


#: The files :func:`save_outputs` writes in each ``setup<N>/<method>/``: the gains, the
#: evaluation and one recording per motion of run_setup's evaluation ("dance", "step").
METHOD_FILES = ("gains.json", "evaluation.json", "dance.json", "step.json")


def remove_stale_outputs(out: Path, results: dict[int, dict], earlier: dict[int, set[str]]) -> list[Path]:
    """Remove the outputs the earlier run (``earlier``, from :func:`earlier_run`) left in
    ``out`` that this run (``results``) did not rewrite, so that no setup or method missing
    from the new summary.json is left beside it: ``setup<N>_errors.png`` of its setups not
    run now, and in each of its ``setup<N>/<method>/`` not written now, the files of
    :data:`METHOD_FILES`; then the folders this emptied. Only what the earlier summary lists,
    and only those names: any other file (and so its folder) stays. Returns the files
    removed."""
    def is_folder(path: Path) -> bool:
        return path.is_dir() and not path.is_symlink()

    removed: list[Path] = []
    for n, methods in sorted(earlier.items()):
        plot = out / f"setup{n}_errors.png"
        if n not in results and plot.is_file():
            plot.unlink()
            removed.append(plot)
        folder = out / f"setup{n}"
        if not is_folder(folder):
            continue
        current = set(results[n]["recordings"]) if n in results else set()
        emptied = False
        for method in sorted(folder.iterdir()):
            if method.name in current or method.name not in methods or not is_folder(method):
                continue
            ours = [method / name for name in METHOD_FILES if (method / name).is_file()]
            for path in ours:
                path.unlink()
            removed += ours
            if ours and not any(method.iterdir()):
                method.rmdir()
                emptied = True
        if emptied and not any(folder.iterdir()):
            folder.rmdir()
    return removed


def _best_heuristic(rows: dict[str, dict]) -> str | None:
    """The heuristic with the lowest AE-A in ``rows`` (None: none has one)."""
    scored = {m: row["AE-A"] for m, row in rows.items() if m != OPTIMISER and row.get("AE-A") is not None}
    return min(scored, key=scored.__getitem__) if scored else None


def plot_errors(result: dict, path: Path) -> Path:
    """The setup at a glance, as PNG: on top, AE-A and OS [deg] of every method, each bar
    labelled with its value; below, per joint (rows), the error SP − PV
    [deg] over time during the motion and the step animation (columns) of the best
    heuristic (lowest AE-A) and the optimiser only: the seven heuristics drawn together,
    several of them oscillating at ±50°, hid both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    methods = list(result["recordings"])
    best = _best_heuristic(rows)
    shown = [m for m in (best, OPTIMISER) if m is not None and m in result["recordings"]]
    first = result["recordings"][methods[0]][0]
    joints = list(first.traces)
    fig, axes = plt.subplots(len(joints) + 1, 2, figsize=(13, 1.7 * len(joints) + 3.2), squeeze=False,
                             gridspec_kw={"height_ratios": [1.6] + [1.0] * len(joints)}, layout="constrained")
    colours = {m: ("k" if m == OPTIMISER else "C3" if m == best else "0.6") for m in rows}
    for ax, column, unit in ((axes[0, 0], "AE-A", "deg"), (axes[0, 1], "OS", "deg")):
        names = [m for m in rows if rows[m].get(column) is not None]
        values = [float(rows[m][column]) for m in names]
        bars = ax.bar(range(len(names)), values, color=[colours[m] for m in names])
        ax.bar_label(bars, labels=[f"{v:.2g}" for v in values], fontsize=7)
        ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=7)
        ax.set_ylabel(f"{column} [{unit}]")
        ax.grid(alpha=0.3, axis="y")
    axes[0, 0].set_title("average absolute error during the motion (AE-A), per method", fontsize=9)
    axes[0, 1].set_title("maximum overshoot of the steps (OS), per method", fontsize=9)
    for m in shown:
        for col, rec in enumerate(result["recordings"][m]):
            for row, joint in enumerate(joints, start=1):
                tr = rec.traces[joint]
                axes[row, col].plot(tr.t, tr.error, lw=1.2 if m == OPTIMISER else 0.9, color=colours[m],
                                    label=m + (" (best heuristic)" if m == best else ""))
    for row, joint in enumerate(joints, start=1):
        axes[row, 0].set_ylabel(f"{joint}\nerror [deg]", fontsize=8)
        for col in range(2):
            axes[row, col].grid(alpha=0.3)
            axes[row, col].tick_params(labelsize=7)
            if row < len(joints):
                axes[row, col].sharex(axes[len(joints), col])
                axes[row, col].tick_params(labelbottom=False)
    axes[1, 0].set_title("motion (AE-A): error SP − PV", fontsize=9)
    axes[1, 1].set_title("step animation (AE-S, OS, ST5, R50): error SP − PV", fontsize=9)
    axes[-1, 0].set_xlabel("time [s]")
    axes[-1, 1].set_xlabel("time [s]")
    axes[1, 1].legend(fontsize=7, loc="upper right")
    headline = ""
    if best is not None and rows.get(OPTIMISER, {}).get("AE-A") is not None:
        ours, theirs = rows[OPTIMISER]["AE-A"], rows[best]["AE-A"]
        headline = (f"\nAE-A: optimiser {ours:.2f} deg vs best heuristic ({best}) {theirs:.2f} deg"
                    + (f", {100 * (1 - ours / theirs):.0f} % lower" if theirs > 0 else ""))
    fig.suptitle(f"Setup {result['setup']}: {result['name']}" + headline, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
