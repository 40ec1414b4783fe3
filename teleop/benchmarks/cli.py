"""``teleop bench NAME``: benchmarks that print figures (and JSON for scripts).

Every benchmark module ``teleop.benchmarks.<name>_bench`` has ``run(quick=False) -> dict``
and ``format_table(result) -> str``; where a peer exists it is measured in the same run. A
benchmark that draws its results takes ``run(..., out=DIR)`` too (``--out``).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from pathlib import Path

#: Benchmark name -> (module, what it measures).
BENCHMARKS = {
    "sim": ("teleop.benchmarks.sim_bench", "simulation real-time factor, model/sim agreement, eye camera frame time"),
    "wbc": ("teleop.benchmarks.wbc_bench", "whole-body QP controller vs pink, per tick"),
    "retarget": ("teleop.benchmarks.retarget_bench", "retargeting throughput (frames/s)"),
    "promp": ("teleop.benchmarks.promp_bench", "ProMP conditioning vs movement_primitives"),
    "video": ("teleop.benchmarks.video_bench", "added latency and throughput of the video path on loopback"),
    "record": ("teleop.benchmarks.record_bench", "recording CPU cost and data lost on SIGKILL"),
    "jog": ("teleop.benchmarks.jog_bench", "AprilTag jogging: detection rate, pose error, command-to-motion, figure-eight"),
    "fidelity": ("teleop.benchmarks.fidelity_bench", "state-space vs impedance runs: joint/torque RMSE, real-time factor"),
}


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
    parser.add_argument("name", choices=sorted(benches), help="which benchmark")
    parser.add_argument("--json", action="store_true", help="print the result as JSON only")
    parser.add_argument("--quick", action="store_true", help="shorter run (for smoke tests; noisier figures)")
    parser.add_argument("--out", type=Path, help="also write plots to this folder (benchmarks that draw them: jog)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    module = importlib.import_module(available()[args.name][0])
    if args.out is not None and "out" in inspect.signature(module.run).parameters:
        result = module.run(quick=args.quick, out=args.out)
        print(f"plots written to {args.out}/", file=sys.stderr)
    else:
        if args.out is not None:
            print(f"teleop bench {args.name}: draws no plots; --out ignored", file=sys.stderr)
        result = module.run(quick=args.quick)
    if args.json:
        print(json.dumps(result))
    else:
        print(module.format_table(result))
    return 0
