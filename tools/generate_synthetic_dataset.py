"""Regenerate datasets/synthetic/: the small synthetic-operator demonstration set.

Usage (from the project root)::

    .venv/bin/python tools/generate_synthetic_dataset.py            # the committed default
    .venv/bin/python tools/generate_synthetic_dataset.py --out /tmp/synth --n-per-task 20 --rate 100

The default (6 demonstrations x 6 tasks, 3 performers, 50 Hz, "compact" float32, seed 0)
keeps the folder under ~3 MB; see datasets/synthetic/README.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from teleop.cli_types import positive_float, positive_int  # noqa: E402
from teleop.inputs.synthetic import TASKS, generate_dataset  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[1]
    parser.add_argument("--out", type=Path, default=root / "datasets" / "synthetic", help="output folder")
    parser.add_argument("--n-per-task", type=positive_int, default=6, help="demonstrations per task (1-999)")
    parser.add_argument("--seed", type=int, default=0, help="dataset seed")
    parser.add_argument("--rate", type=positive_float, default=50.0, help="sampling rate [Hz]")
    parser.add_argument("--performers", type=positive_int, default=3, help="number of distinct performers")
    parser.add_argument("--precision", default="compact", choices=("float64", "float32", "compact"),
                        help="storage precision (see teleop.inputs.synthetic.generate_dataset)")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS, help="tasks to generate")
    args = parser.parse_args(argv)
    if args.n_per_task > 999:
        parser.error(f"argument --n-per-task: must be <= 999, got {args.n_per_task}")
    # Demonstrations already in --out that this run would not rewrite would stay beside the
    # new ones, unlisted in the new index.csv, and `teleop train` would learn from them.
    writes = {Path(task) / f"{task}_{k}.npz" for task in args.tasks for k in range(args.n_per_task)}
    stale = sorted(str(p.relative_to(args.out)) for p in args.out.glob("*/*.npz")
                   if p.relative_to(args.out) not in writes) if args.out.is_dir() else []
    if stale:
        parser.error(f"--out {args.out} holds {len(stale)} demonstrations this run would not rewrite "
                     f"({', '.join(stale[:3])}{', ...' if len(stale) > 3 else ''}): remove them or choose "
                     "another --out")

    start = time.perf_counter()
    paths = generate_dataset(args.out, args.n_per_task, args.seed, tasks=tuple(args.tasks), rate_hz=args.rate,
                             n_performers=args.performers, precision=args.precision)
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"wrote {len(paths)} demonstrations to {args.out} ({size / 1e6:.2f} MB) "
          f"in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
