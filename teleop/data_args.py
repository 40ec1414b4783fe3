"""Command-line options shared by the commands that read folders of takes."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

from teleop.cli_types import PreconditionError, UsageError, sample_rate_hz
from teleop.takes import Take, list_take_files, load_take_files, performer_of, select_take_files, split_csv

FILTERS = ("performers", "exclude_performers", "tasks")


def add_take_filters(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """--[prefix]performers, --[prefix]exclude-performers, --[prefix]tasks."""
    dash = f"{prefix}-" if prefix else ""
    parser.add_argument(f"--{dash}performers", type=_names,
                        help="comma-separated performer codes to keep (HDM05: bd,bk,dg)")
    # No default "": ``--exclude-performers ''`` (an unset shell variable) dropped nobody without a
    # word, and a performer meant to be held out was learned from; refused as --performers ''.
    parser.add_argument(f"--{dash}exclude-performers", type=_names,
                        help="comma-separated performer codes to drop")
    parser.add_argument(f"--{dash}tasks", type=_names, help="comma-separated task labels to keep (default: all)")


def _names(text: str) -> str:
    """A comma-separated list of at least one name (kept as text; :func:`split_csv` splits
    it). ``--tasks ''`` kept every task, as if the option were not given, and
    ``--exclude-performers ''`` dropped no one."""
    if not split_csv(text):
        raise argparse.ArgumentTypeError("give one or more comma-separated names (leave the option out for all)")
    return text


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--robot", default="icub", help="robot description (default: icub)")
    parser.add_argument("--rate-hz", type=sample_rate_hz, default=None,
                        help="sampling rate of Xsens CSV and AMC files, which do not state it (default: 100 and 120)")


def take_files(args: argparse.Namespace, root: Path, prefix: str = "",
               check_names: bool = True) -> list[tuple[Path, str]]:
    """(file, label) of the takes under ``root`` that pass the filters of ``prefix``.

    Only lists files, so that a filter that selects nothing fails before anything is read
    or learned; the error names the options given and what ``root`` holds. With
    ``check_names``, so does a filter naming a task or performer that ``root`` lacks (see
    :func:`check_filter_names`; off for a caller that checks several roots together).
    """
    key = f"{prefix}_" if prefix else ""
    values = {name: getattr(args, key + name) for name in FILTERS}
    files = list_take_files(root, warn=lambda message: warn_skipped(args, message), command=command_of(args, prefix))
    chosen = select_take_files(files, performers=split_csv(values["performers"]),
                               exclude_performers=split_csv(values["exclude_performers"]) or (),
                               tasks=split_csv(values["tasks"]))
    if not chosen:
        dash = f"{prefix}-" if prefix else ""
        given = " ".join(f"--{dash}{name.replace('_', '-')} {value}" for name, value in values.items() if value)
        performers = ", ".join(sorted({performer_of(f) for f, _ in files} - {""})) or "none named in the file names"
        tasks = ", ".join(sorted({label for _, label in files}))
        raise PreconditionError(f"no takes under {root} match {given} (performers there: {performers}; "
                                f"tasks: {tasks})")
    if check_names:
        check_filter_names(args, files, str(root), prefix)
    return chosen


def command_of(args: argparse.Namespace, prefix: str = "") -> str:
    """The command line that reads a data folder, for messages that say what to give instead
    (``teleop eval promp --train``, not ``teleop train``, when eval promp was run)."""
    words = ["teleop", getattr(args, "command", None) or "train"]
    if isinstance(getattr(args, "what", None), str):
        words.append(args.what)
    if prefix:
        words.append(f"--{prefix}")
    return " ".join(words)


def warn_skipped(args: argparse.Namespace, message: str) -> None:
    """``teleop CMD: warning: message`` on stderr (skipped takes, see :mod:`teleop.takes`)."""
    print(f"teleop {getattr(args, 'command', None) or 'data'}: warning: {message}", file=sys.stderr)


def check_filter_names(args: argparse.Namespace, files: list[tuple[Path, str]], where: str, prefix: str = "") -> None:
    """Every task and performer a filter of ``prefix`` names must be among ``files``: a typo
    (``--tasks squat,sqaut``, ``--exclude-performers BD``) would otherwise be dropped
    without a word, and a performer meant to be held out would be learned from."""
    key, dash = (f"{prefix}_", f"{prefix}-") if prefix else ("", "")
    present = {"tasks": {label for _, label in files}, "performers": {performer_of(f) for f, _ in files} - {""}}
    for name in FILTERS:
        kind = "tasks" if name == "tasks" else "performers"
        unknown = [v for v in split_csv(getattr(args, key + name)) or () if v not in present[kind]]
        if unknown:
            there = ", ".join(sorted(present[kind])) or "none named in the file names"
            # Found from the file names, before any take is read: no TELEOP_DEBUG hint.
            raise PreconditionError(f"--{dash}{name.replace('_', '-')} {getattr(args, key + name)}: "
                             f"{', '.join(unknown)} not under {where} ({kind} there: {there})")


def check_out_folder(out: Path, option: str = "--out", file: Path | None = None) -> None:
    """An output folder must be a folder (or not exist yet), not lie below a file, and be
    one we can make and write in: found before the work, not when the results are written
    after it (``--out /proc/x`` failed after a minute of simulation).

    A folder that does not exist yet is made and removed again, so the check leaves
    nothing behind (an interrupted command must not leave empty folders either). ``file``:
    the output file the option names, whose folder ``out`` is (said in the message)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise PreconditionError(f"{option} {out} is a file: give a folder for the outputs")
    check_output_location(out, option)
    made = [p for p in (out, *out.parents) if not p.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
        # access() says yes to root on a read-only file system: make a file to know.
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        where = f"{option} {file}: cannot write in {out}" if file is not None else f"{option} {out}: cannot write there"
        raise PreconditionError(f"{where} ({exc.strerror or exc})") from None
    finally:
        for folder in made:          # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()


def check_output_location(path: Path, option: str) -> None:
    """Refuse an output below a file (``-o notes.txt/library.npz``) before any work: it
    would otherwise fail only when written, after the reading and learning."""
    for parent in Path(path).parents:
        if parent.exists() and not parent.is_dir():
            raise PreconditionError(f"{option} {path}: {parent} is a file, not a folder")


def check_recording_name(path: Path, option: str) -> None:
    """Refuse a recording file name without the .mcap suffix: ``teleop dataset list`` and
    ``export FOLDER`` find recordings by it, and passed over one recorded as ``session``."""
    if Path(path).suffix.lower() != ".mcap":
        raise UsageError(f"{option} {path}: give a .mcap file name (`teleop dataset list/export FOLDER` "
                         "find recordings by it)")


def check_recording_output(path: Path, option: str, force: bool) -> None:
    """Refuse, before a session starts, a recording output that cannot be or must not be
    written: a folder, a name without .mcap, a place below a file, an existing file without
    ``force`` (a recording is often the only copy of a session), a named pipe or device
    (opening a pipe waited for a reader for ever), and a recording another recorder is still
    writing (``force`` emptied it under the live session)."""
    from retarget.file_checks import refuse_special_file
    from teleop.record.file_lock import being_written

    # A folder is what is on disk, not a malformed value: exit code 1, checked before the
    # station starts (opening it later would only fail with IsADirectoryError).
    if path.is_dir():
        raise PreconditionError(f"{option} {path} is a folder: give a file name")
    check_recording_name(path, option)
    check_output_location(path, option)   # below a file: "File exists" once recording
    # Its folder made and written in, as a test: -o /proc/x.mcap failed once the session had
    # started ("No such file or directory", with the debug hint).
    check_out_folder(path.parent, option, file=path)
    if path.exists() and not force:
        # What is on disk, not a malformed value: exit code 1, as every command's OUT that exists.
        raise PreconditionError(f"{option} {path} exists: pass --force to overwrite it, or choose another file")
    refuse_special_file(path, lambda text: PreconditionError(f"{option} {text}: give a file name"))
    if being_written(path):
        raise PreconditionError(f"{option} {path} is being written by another recorder (a session under way): "
                                "choose another file")


def robot_model_of(args: argparse.Namespace):
    """The robot model ``--robot`` names; PreconditionError ("--robot NAME: ...", the error
    line alone) if no description has that name or the description is malformed: said
    before any work, as what to change on the command line."""
    from teleop.robot.description import DescriptionError
    from teleop.robot.model import RobotModel

    try:
        return RobotModel(args.robot)
    except DescriptionError as exc:
        raise PreconditionError(f"--robot {args.robot}: {exc}") from None


def robot_target_of(args: argparse.Namespace):
    from teleop.robot.target import robot_target

    return robot_target(robot_model_of(args))


def read_take_files(args: argparse.Namespace, files: list[tuple[Path, str]], target=None) -> list[Take]:
    """Read and retarget the takes that :func:`take_files` chose."""
    return load_take_files(files, target or robot_target_of(args), rate_hz=args.rate_hz,
                           desc="reading takes")
