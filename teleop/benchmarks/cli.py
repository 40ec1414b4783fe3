"""``teleop bench NAME``: benchmarks that print figures (and JSON for scripts).

Every benchmark module ``teleop.benchmarks.<name>_bench`` has ``run(quick=False) -> dict``
and ``format_table(result) -> str``; where a peer exists it is measured in the same run. A
benchmark that draws its results takes ``run(..., out=DIR)`` too (``--out``), one that reads
recorded data ``run(..., data=DIR)`` (``--data``), and a long one ``run(..., progress=True)``
(a line per stage on stderr; off with ``--json``).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys

from teleop.benchmarks.stages import load_average, load_line
from teleop.cli_types import UsageError, nonempty_path
from teleop.json_safe import dumps

#: Benchmark name -> (module, what it measures).
BENCHMARKS = {
    "sim": ("teleop.benchmarks.sim_bench", "simulation real-time factor, model/sim agreement, eye camera frame time"),
    "wbc": ("teleop.benchmarks.wbc_bench", "whole-body QP controller vs pink, per tick"),
    "retarget": ("teleop.benchmarks.retarget_bench", "retargeting throughput (frames/s)"),
    "promp": ("teleop.benchmarks.promp_bench", "ProMP conditioning vs movement_primitives"),
    "video": ("teleop.benchmarks.video_bench", "added latency and throughput of the video path on loopback"),
    "fec": ("teleop.benchmarks.fec_bench", "video frames kept over lossy and bursty links, by parity layout"),
    "record": ("teleop.benchmarks.record_bench", "recording CPU cost and data lost on SIGKILL"),
    "jog": ("teleop.benchmarks.jog_bench",
            "AprilTag jogging: detection rate, pose error, command-to-motion, figure-eight"),
    "fidelity": ("teleop.benchmarks.fidelity_bench",
                 "state-space vs impedance runs: joint/torque RMSE, real-time factor"),
}


#: The line under a --quick run's table.
QUICK_LINE = "quick run (--quick): fewer samples, noisier figures; run without --quick for the README's figures"


def available() -> dict[str, tuple[str, str]]:
    """The benchmarks whose module this build ships."""
    out = {}
    for name, (module, help_text) in BENCHMARKS.items():
        if importlib.util.find_spec(module) is not None:
            out[name] = (module, help_text)
    return out


def register(sub: argparse._SubParsersAction) -> None:
    benches = available()
    parser = sub.add_parser("bench", help="run a benchmark and print its figures",
                            description="Run a benchmark. " + "; ".join(f"{n}: {h}" for n, (_, h) in benches.items()))
    # metavar: argparse names a missing positional by it ("required: {fidelity,jog,...}", not "required: name").
    parser.add_argument("name", choices=sorted(benches), metavar="{" + ",".join(sorted(benches)) + "}",
                        help="which benchmark")
    parser.add_argument("--json", action="store_true", help="print the result as JSON only")
    parser.add_argument("--quick", action="store_true", help="shorter run (for smoke tests; noisier figures)")
    # nonempty_path: `--out ''` (an unset shell variable) wrote the plots into the current folder.
    parser.add_argument("--out", type=nonempty_path,
                        help="also write plots to this folder (benchmarks that draw them: jog)")
    # nonempty_path: `--data ''` read as `.`, and measured whatever pN.csv the current folder held.
    parser.add_argument("--data", type=nonempty_path, metavar="DIR",
                        help="recorded data to measure on (retarget: a folder of Xsens pN.csv takes; default "
                             "../shared/data/xsens_putaside_box, else a generated motion)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    benches = available()
    module = importlib.import_module(benches[args.name][0])
    accepts = inspect.signature(module.run).parameters
    options = {"quick": args.quick}
    for option, reads in (("out", "draws no plots"), ("data", "reads no recorded data")):
        value = getattr(args, option)
        if value is not None and option in accepts:
            options[option] = value
        elif value is not None:
            # Refused, as every command refuses options that do not apply to it: a warning
            # above a table went unseen, and the plots asked for were never written.
            takers = [name for name, (path, _) in benches.items()
                      if option in inspect.signature(importlib.import_module(path).run).parameters]
            raise UsageError(f"bench {args.name} {reads}: --{option} applies to {', '.join(takers) or 'none'}")
    if "progress" in accepts:
        options["progress"] = True   # on stderr: --json keeps stdout for the JSON
    result = module.run(**options)
    # Measured as the run ends: every timing above depends on it (fidelity's table says it too).
    result.setdefault("load_average_1min", load_average())
    # Said in every benchmark's output (a line under the table, "quick": true in the JSON): a
    # --quick table read like the README's figures (sim: 1 s of simulation instead of 5,
    # promp: 1 repetition instead of 5), and only jog's and retarget's JSON carried the flag.
    if args.quick:
        result["quick"] = True
    if "out" in options:
        print(f"plots written to {args.out}/", file=sys.stderr)
    if args.json:
        # Strict JSON: a figure that could not be measured (jog's pose error when a detector
        # saw no tag, a step that never reached half way) is null, not a bare NaN that jq
        # and other parsers reject; numpy scalars are numbers.
        print(dumps(result))
    else:
        print(module.format_table(result))
        if args.quick:
            print(QUICK_LINE)
        print(load_line(result["load_average_1min"]))
    return 0
