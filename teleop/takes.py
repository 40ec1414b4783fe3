"""Labelled takes from folders of motion files, retargeted to robot references.

Accepted layouts (what ``teleop train``, ``teleop trial`` and ``teleop eval`` read):

* a folder of task folders, one per task label, holding motion files of any supported
  format (HDM05: ``<task>/HDM_<performer>_<task>_<nnn>_120.amc`` with the skeletons in a
  sibling ``skeletons/``; the synthetic operator's ``<task>/<task>_<k>.npz``; exported
  recordings' reference trajectories ``<task>/*.npz``);
* a folder of Xsens CSV pairs ``N.csv`` + ``pN.csv`` (one task, labelled with the folder
  name);
* one task folder (motion files and no task folders: one task, labelled with the folder
  name, e.g. ``hdm05/squat1Reps``);
* a single motion file.

A folder of task folders is read one level deep. A sub-folder that holds task folders
itself (a dataset root given one level too high, e.g. ``data/`` holding ``hdm05/<task>/``)
is not a task, and its takes are never dropped without a word:

* when nothing else in the folder holds takes, it is an error naming the sub-folder(s) to
  give instead (``data/hdm05 holds task folders, not takes: give it directly``);
* when other task folders (or the folder's own motion files) hold takes, those are read
  and a warning names each skipped sub-folder and its takes: such a folder may well
  hold another dataset beside the tasks on purpose, and the rest stays readable without
  moving files. Give the sub-folder as its own folder to read its takes.

A sub-folder counts as a dataset root when it has no takes of its own, or when two or more
of its sub-folders hold takes (a dataset's task folders; ``synthetic/`` with its
``index.csv``). A task folder with takes of its own and one sub-folder of more (an
``old/`` archive, say) stays a task: its own takes are read, and a warning says the
deeper ones are not.

Human motion is retargeted (calibrated on its first frame, Eq. 2.1) with the robot's
:class:`retarget.robot_target.RobotTarget`; reference trajectories are taken as they are.
"""

from __future__ import annotations

import filecmp
import os
import re
import shlex
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from retarget.envelope import ReferenceEnvelope
from retarget.file_checks import refuse_special_file
from retarget.human import HumanMotion
from retarget.mapping import retarget_motion
from retarget.readers import read_motion, sniff_format
from retarget.references import FLAT_LABELS, HAND_INDICES, ReferenceTrajectory
from retarget.robot_target import RobotTarget
from teleop.cli_types import PreconditionError, UsageError
from teleop.output_set import is_hidden
from teleop.progress import progress_bar

MOTION_SUFFIXES = {".amc", ".bvh", ".mvnx", ".npz", ".csv", ".json"}


class NoTakesError(FileNotFoundError):
    """A data folder that is missing or holds no takes, found when its files are listed,
    before any is read: the error says what to give instead, and no more (no TELEOP_DEBUG
    hint, see teleop.cli)."""

    before_work = True


_HDM05_PERFORMER = re.compile(r"HDM_([a-z]{2})_")


@dataclass
class Take:
    """One labelled take.

    Attributes:
        path: the file it came from.
        label: task label.
        performer: performer code where the file name tells it (HDM05: bd, bk, dg), else "".
        trajectory: retargeted references (stance frame).
        retargeted: whether the references were retargeted here, to the robot target given
            (False: a references file, made for whichever robot it was made for).
        robot_note: a references file's note of the robot it was made for
            (:func:`teleop.robot.target.library_metadata`: written by ``teleop retarget`` and
            ``teleop dataset export``), or None (retargeted here, or a file without one).
    """

    path: Path
    label: str
    performer: str
    trajectory: ReferenceTrajectory
    retargeted: bool = True
    robot_note: dict[str, str] | None = None


def _npz_kind(path: Path) -> str | None:
    """What the product's own .npz at ``path`` is, from its member names (one read of the
    archive's directory and, for a named one, its small ``format`` member): "references" (a
    ReferenceTrajectory: ``values`` and no ``format``), the ``format`` it names (a task
    library, a human motion), or None (neither, or not a readable .npz: the motion reader
    then says so, naming the file)."""
    from retarget.npz_checks import CheckedNpz

    try:
        with np.load(path, allow_pickle=False) as data:
            if "format" not in data:
                return "references" if "values" in data else None
            return str(CheckedNpz(data)["format"])
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error):
        return None


def robot_note(path: Path) -> dict[str, str] | None:
    """The note of the robot a references file was made for (its string members named
    :data:`teleop.robot.target.ROBOT_NOTE_KEYS`), or None without one.

    Raises:
        InvalidReferences: naming ``path``, when a note member cannot be read (damaged
            data raises zlib.error, an object array ValueError, neither naming the file).
    """
    from retarget.npz_checks import NPZ_READ_ERRORS, CheckedNpz
    from retarget.references import InvalidReferences
    from teleop.robot.target import ROBOT_NOTE_KEYS

    note = {}
    try:
        with np.load(path, allow_pickle=False) as data:
            members = CheckedNpz(data)
            for key in ROBOT_NOTE_KEYS:
                if key not in members:
                    continue
                value = members[key]    # read once: each access decompresses the member again
                if value.dtype.kind == "U" and value.ndim == 0:
                    note[key] = str(value)
    except NPZ_READ_ERRORS as exc:
        raise InvalidReferences(f"{path}: damaged .npz file ({exc})") from None
    return note or None


def _is_reference_npz(path: Path) -> bool:
    return _npz_kind(path) == "references"


def _motion_files(folder: Path) -> list[Path]:
    return sorted(f for f in folder.iterdir()
                  if f.is_file() and f.suffix.lower() in MOTION_SUFFIXES and not is_hidden(f))


def _sub_folders(folder: Path) -> list[Path]:
    # skeletons/: HDM05's ASF files, which the AMC reader finds beside the task folders.
    return sorted(d for d in folder.iterdir() if d.is_dir() and d.name != "skeletons" and not is_hidden(d))


def _task_files(folder: Path) -> list[Path]:
    """The takes of a task folder: its Xsens pose files, or else its motion files."""
    return sorted(folder.glob("p[0-9]*.csv")) or _motion_files(folder)


def _takes_below(folder: Path, depth: int = 3) -> int:
    """Takes in the sub-folders of ``folder`` (any level down to ``depth``: a bound, as
    a symlink may loop): non-zero for a folder that holds task folders, not takes."""
    if depth == 0:
        return 0
    return sum(len(_task_files(d)) + _takes_below(d, depth - 1) for d in _sub_folders(folder))


def _folders_with_takes(folder: Path) -> int:
    """How many sub-folders of ``folder`` hold takes, at any depth (two or more: a dataset's
    task folders; one: a task's archive, say)."""
    return sum(1 for d in _sub_folders(folder) if _task_files(d) or _takes_below(d))


class SkippedTakesWarning(UserWarning):
    """Takes under a folder of takes that are not read (see the module docstring)."""


def _warn(message: str) -> None:
    warnings.warn(message, SkippedTakesWarning, stacklevel=3)


def _file_label(path: Path) -> str:
    """The task of a take given as a file: the label a references take holds (what `teleop
    dataset export` or `teleop retarget` stored, and `teleop info` shows), else its folder's
    name. A references take copied out of its task folder was learned under the name of the
    folder it was copied to (the working folder's, for a bare file name)."""
    if path.suffix.lower() == ".npz" and _npz_kind(path) == "references":
        from teleop.record.labels import task_problem     # (loads the MCAP reader: only here)

        try:
            with np.load(path, allow_pickle=False) as data:
                label = str(data["label"]) if "label" in data else ""
        except (OSError, ValueError, zipfile.BadZipFile, zlib.error, EOFError):
            label = ""         # the reader says what is wrong with it, naming the file
        if label and task_problem(label) is None:     # a label a task can have (the export's rule)
            return label
    return folder_label(path.parent)


def folder_label(folder: Path) -> str:
    """The task label a folder gives its takes: its name, taken from the absolute path, so
    that ``.`` (``cd demos/wave && teleop train .``), ``..`` or the folder of a bare file
    name (``teleop train r1_0.npz``, whose parent is ``.``) are named too: ``Path(".").name``
    is "", which left the takes without a label. ``os.path.abspath`` normalises the path
    without following symlinks, so a linked folder keeps the name it was given by."""
    return Path(os.path.abspath(folder)).name


def list_take_files(root: Path, warn: Callable[[str], None] | None = None,
                    command: str = "teleop train") -> list[tuple[Path, str]]:
    """(file, label) of every take under ``root`` (see the module docstring).

    ``command`` is the command line that was given ``root`` (``teleop eval promp --train``):
    the messages about a folder of datasets say how to give one of them to it.

    ``warn`` is called with each message about skipped takes (default: a
    :class:`SkippedTakesWarning`); a folder whose only takes would be skipped is an error.
    """
    root = Path(root)
    if not root.exists():
        raise NoTakesError(f"{root}: no such file or folder")
    refuse_special_file(root)     # neither is_file() nor a folder: it was globbed, "Not a directory"
    if root.is_file():
        return [(root, _file_label(root))]
    pairs = sorted(root.glob("p[0-9]*.csv"))
    if pairs:  # Xsens demos: the pose file of each pair
        return [(p, folder_label(root)) for p in pairs]
    out = []
    nested: list[tuple[Path, int]] = []   # sub-folders that hold task folders, and their takes
    for sub in _sub_folders(root):
        own, below = _task_files(sub), _takes_below(sub)
        if below and (not own or _folders_with_takes(sub) >= 2):
            # Read as it would be if given directly: one that holds task folders is a
            # dataset of its own (its loose files, e.g. an index.csv, are not takes).
            nested.append((sub, below))
            continue
        out += [(f, sub.name) for f in own]
        if below:
            # A task with, say, an old/ folder beside its takes: its own takes are read.
            (warn or _warn)(f"{sub}: {below} take(s) in its sub-folders not read (a task's takes are the files "
                            "in its own folder)")
    if not out:
        # No task folders: a folder of motion files is one task (task folders win, so that a
        # dataset's index.csv beside its task folders is not read as a take).
        out = [(f, folder_label(root)) for f in _motion_files(root)]
    if nested and not out:
        named = " and ".join(f"{sub} ({n} takes)" for sub, n in nested)
        verb, them = ("holds", "it") if len(nested) == 1 else ("hold", "them")
        raise NoTakesError(f"{root}: no takes of its own: {named} {verb} task folders, not takes: give "
                                f"{them} directly instead (e.g. {command} {' '.join(str(s) for s, _ in nested)})")
    for sub, n in nested:
        (warn or _warn)(f"{sub} skipped ({n} takes): it holds task folders, not takes; give it directly "
                        f"to read them (e.g. {command} {sub})")
    if not out:
        suffixes = ", ".join(sorted(MOTION_SUFFIXES))
        recordings = [*root.glob("*.mcap"), *root.glob("*/*.mcap")]
        hint = (f"; its {len(recordings)} .mcap recording(s) need `teleop dataset export {root} -o DIR` first"
                if recordings else "")
        raise NoTakesError(f"{root}: no motion files ({suffixes}) in it or in its task folders, "
                                f"and no Xsens pN.csv files{hint}")
    return out


def performer_of(path: Path) -> str:
    match = _HDM05_PERFORMER.search(path.name)
    return match.group(1) if match else ""


def same_take(a: Path, b: Path) -> bool:
    """Whether two take files hold the same take: one file (--train and --test may spell a
    folder differently: relative / absolute, through a symlink) or a byte-identical copy
    (a test folder of copies of training takes). --leave-one-out must leave the test take
    out of its library either way."""
    a, b = Path(a), Path(b)
    if a == b or a.resolve() == b.resolve():
        return True
    try:
        # Sizes first: the content is compared only for files of equal size.
        return a.stat().st_size == b.stat().st_size and filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


def check_left_out(train: Sequence[tuple[Path, str]], test: Sequence[tuple[Path, str]]) -> None:
    """With --leave-one-out every test take must be one of the training takes (by
    :func:`same_take`), else nothing is left out for it and its figures are in-sample or
    plainly held out without saying so. Takes are (file, label) pairs: runs before reading."""
    for path, _ in test:
        if not any(same_take(f, path) for f, _ in train):
            raise PreconditionError(f"--leave-one-out: test take {path} is not one of the --train takes (by path or "
                             "content), so there is nothing to leave out for it: test on takes of the training "
                             "set, or drop --leave-one-out")


def tasks_not_learned(train: Sequence[tuple[Path, str]], test: Sequence[tuple[Path, str]],
                      leave_one_out: bool) -> list[tuple[Path, str, str]]:
    """The test takes whose task no training take teaches (with ``leave_one_out``: no training
    take other than itself), as (file, label, why) with ``why`` a sentence for the user.
    Takes are (file, label) pairs: runs before anything is read."""
    tasks = ", ".join(sorted({lab for _, lab in train}))
    out = []
    for path, label in test:
        if any(lab == label and not (leave_one_out and same_take(f, path)) for f, lab in train):
            continue
        if any(lab == label for _, lab in train):
            why = (f"--leave-one-out: {path} is the only training take of task {label!r}, so no library is "
                   "left that knows it; give at least two takes of each test task")
        else:
            why = f"test take {path} is of task {label!r}, which the training takes do not have (tasks: {tasks})"
        out.append((path, label, why))
    return out


def recording_motion(path: Path) -> HumanMotion:
    """The operator input recorded in ``path`` (a ``teleop operator --record`` recording:
    its ``/operator/segments``, the raw human motion, whole) as one motion, so that
    ``teleop retarget``, ``operator --input`` and ``stream-mvn`` replay a recorded session.
    Raises ValueError, saying what the recording is good for instead, when it holds none."""
    from teleop.record.channels import OPERATOR_INPUT
    from teleop.record.mcap_index import RecordingFormatError
    from teleop.record.reader import open_recording

    try:
        recording = open_recording(path)
    except (RecordingFormatError, OSError) as exc:
        # The reader's message names the file already: once is enough.
        reason = str(exc).removeprefix(f"{path}: ")
        raise ValueError(f"{path}: not a readable recording ({reason})") from None
    if OPERATOR_INPUT not in recording.channels:
        damage = _damage_of(recording, verify=True)
        station = next((meta.get("station") for name, meta in recording.metadata if "station" in meta), None)
        if damage and station == "robot":
            # A robot station records no operator input at all: "could be read: the file is
            # incomplete" blamed the crash for what the file never held.
            recovered = Path("RECOVERED.mcap")
            raise ValueError(f"{path}: a robot station's recording, which holds no operator input ({OPERATOR_INPUT}: "
                             f"`teleop operator --record` records it), and it is {damage}; recover it first "
                             f"(teleop dataset recover {path} -o {recovered}), then "
                             f"{_what_it_is_good_for(recording, recovered)}")
        if damage:
            # Its input may have been in what is lost: "a recording without operator input"
            # sent the user looking for a wrong command, not at a damaged file.
            raise ValueError(f"{path}: no operator input could be read: the file is {damage} (`teleop dataset "
                             f"inspect {path}` says what is left)")
        raise ValueError(f"{path}: a recording without operator input ({OPERATOR_INPUT}, which `teleop operator "
                         f"--record` records), so no human motion to read; {_what_it_is_good_for(recording, path)}")
    motion = recording.operator_motion()
    damage = _damage_of(recording)    # what reading the input met: no second pass over the file
    if damage:
        warnings.warn(f"{path} is {damage}: {len(motion)} frames of operator input read ({motion.duration:.2f} s); "
                      "what was lost is not replayed", DamagedRecordingWarning, stacklevel=2)
    return motion


class DamagedRecordingWarning(UserWarning):
    """A recording read in part: cut short (a crash) or with damaged chunks skipped."""


def _damage_of(recording, verify: bool = False) -> str | None:
    """How ``recording`` is incomplete or damaged ("cut short (...)", "damaged (N damaged
    chunks skipped ...)"), or None if it is whole (``verify``: check every chunk first; else
    what reading it found, which checks them all once it meets a damaged one)."""
    index = recording.index
    if verify:
        index.verify_chunks()
    parts = []
    if index.problem:
        parts.append(f"cut short ({index.problem})")
    elif not index.complete:
        parts.append("incomplete (its recorder did not finish it)")
    report = index.damage_report()
    if report:
        parts.append(f"damaged ({report})")
    return ", and ".join(parts) or None


def _what_it_is_good_for(recording, path: Path) -> str:
    """The commands that make training data of a recording without operator input: its
    episodes exported, from the channel it holds (a robot station's records the commands
    as delivered), labelled first if none is."""
    from teleop.record.channels import COMMANDS_DELIVERED, REFERENCES

    if REFERENCES in recording.channels:
        export = f"teleop dataset export {path} -o DIR"
    elif COMMANDS_DELIVERED in recording.channels:
        export = f"teleop dataset export {path} --channel delivered -o DIR"
    else:
        return "nor any references: nothing to replay or train on"
    label = "" if any(episode.task for episode in recording.episodes()) else \
        f"label it first (teleop dataset label {path} --task NAME), then "
    return f"its labelled episodes are training data: {label}{export}, then teleop train DIR"


def check_human_motion_file(path: Path) -> None:
    """Refuse, saying what to do instead, robot references given where human motion is
    needed (a ReferenceTrajectory .npz from `teleop dataset export` or `teleop retarget`),
    which the motion reader would only call "not a human motion file". Raises ValueError."""
    from promp.library import FORMAT_NAME as LIBRARY_FORMAT

    path = Path(path)
    kind = _npz_kind(path) if path.is_file() and path.suffix.lower() == ".npz" else None
    if kind == LIBRARY_FORMAT:
        raise PreconditionError(f"{path}: a ProMP task library (made by teleop train), not a motion: give it to "
                                f"teleop robot --library {path}; teleop train, eval and trial learn their own from "
                                "folders of takes")
    if kind == "references":
        raise PreconditionError(f"{path}: robot references (already retargeted), not a human motion: teleop train, "
                                f"eval and trial take it as a take (e.g. teleop train {path}, labelled "
                                f"{_file_label(path)!r}); here give the human motion file it was made from")


#: Why ``--rate-hz`` is refused for a file that states its rate: said alike by every command
#: that reads motion files (else it was ignored without a word, the take played at its own).
RATE_HZ_APPLIES = "--rate-hz applies to Xsens CSV and AMC files only (they do not state their rate)"


def takes_a_rate(path: Path) -> bool:
    """Whether the motion file ``path`` needs the rate it is read at (``--rate-hz``): an
    Xsens CSV export or an AMC take, which do not state it (read at 100 and 120 Hz without
    one: HDM05's and CMU's AMC are 120 Hz, but a 60 Hz take played twice as fast and could
    not be corrected), recognised by content (one saved as .txt too). Every other format
    states its own, and a recording gives its input's times; an unreadable file takes none
    (reading it says what is wrong, naming it)."""
    path = Path(path)
    if path.suffix.lower() == ".mcap":
        return False
    try:
        return sniff_format(path) in ("xsens-csv", "amc")
    except ValueError:
        return False


#: What states the rate of a motion file, by :func:`retarget.readers.sniff_format`'s name of
#: its format (the formats that do not state it, Xsens CSV and AMC, are not here).
_RATE_STATED_BY = {"bvh": "a BVH file", "mvnx": "an Xsens MVNX file", "vr-json": "a VR tracker JSON file",
                   "vr-csv": "a VR tracker CSV file"}
#: The product's own .npz files that state it (:func:`_npz_kind`): their times.
_NPZ_STATING_A_RATE = {"humanmotion-v1": "a human motion .npz file", "references": "a references .npz file"}


def rate_stated_by(path: Path) -> str | None:
    """What the motion file ``path`` is, when it states its own rate ("a BVH file", "a
    recording"), told from its name and first bytes only, never by reading it: the check of
    ``--rate-hz`` comes before the reading, which took seconds for a large file and was all
    for a refusal. None for a file that takes a rate (Xsens CSV, AMC), and for one that
    cannot be told (missing, unrecognised, a damaged archive, a task library): reading it
    then says what is wrong, naming it."""
    path = Path(path)
    if path.suffix.lower() == ".mcap":
        return "a recording" if path.is_file() else None     # its input's times
    try:
        fmt = sniff_format(path)
    except ValueError:
        return None
    if fmt == "npz":
        return _NPZ_STATING_A_RATE.get(_npz_kind(path) or "")
    return _RATE_STATED_BY.get(fmt)


def check_rate_hz(rate_hz: float | None, paths: Sequence[Path]) -> None:
    """Refuse ``--rate-hz`` (a UsageError, exit code 2) when none of the motion files
    ``paths`` takes one: they state their rate, and it would be ignored without a word
    while the user expects the takes read at it. Shared by every command that reads motion
    files (retarget, stream-mvn, operator --input, train) and called before any of them is
    read: told from the files' names and first bytes (:func:`rate_stated_by`). A file that
    cannot be told does not refuse the rate: reading it says what is wrong with it."""
    if rate_hz is None or not paths:
        return
    paths = list(dict.fromkeys(paths))    # eval/trial with one folder as both sets: each take once
    stated = [rate_stated_by(path) for path in paths]
    if None in stated:
        return
    if len(paths) == 1:
        raise UsageError(f"{RATE_HZ_APPLIES}; {paths[0]} is {stated[0]}, which states its own")
    raise UsageError(f"{RATE_HZ_APPLIES}; none of the {len(paths)} takes is one: their files state their rate")


def read_motion_file(path: Path, rate_hz: float | None = None) -> HumanMotion:
    """A human motion file: :func:`retarget.readers.read_motion`, with ``rate_hz`` for Xsens
    CSV and AMC files (which do not state their rate; None: their readers' 100 and 120 Hz),
    or a recording's operator input
    (:func:`recording_motion`); robot references are refused (:func:`check_human_motion_file`)."""
    path = Path(path)
    if path.suffix.lower() == ".mcap" and path.is_file():
        return recording_motion(path)
    check_human_motion_file(path)
    opts = {"rate_hz": rate_hz} if rate_hz and takes_a_rate(path) else {}
    return read_motion(path, **opts)


#: Fewest frames a take may have. Fewer is a fragment, not a motion (a recording cut short, a
#: stray episode): learned, a 2-frame (0.01 s) and a 5-frame take beside three 3 s takes
#: pulled their task's mean motion from 2.99 s to 1.81 s, and the speed ratios the model
#: allows to 180. Ten frames are 0.08 s at HDM05's 120 Hz and 0.1 s at Xsens's 100 Hz, the
#: window the onset detector needs to see a motion start (CompensatorConfig.onset_min_duration).
MIN_TAKE_FRAMES = 10


#: Least a take's hands must move [m]: the largest distance either hand's reference gets from
#: its first-frame position. A take with less is no motion (a take frozen at its first frame,
#: an operator standing still): no onset is found in it, so the whole take was learned as the
#: motion, or scored, without a word. The takes that move least move far more: 0.14 m
#: (datasets/synthetic squat_5), 0.25 m (HDM05 HDM_bd_elbowToKnee1RepsLelbowStart_004), and
#: more than 0.19 m in the Xsens put-aside and CMU takes; 5 mm leaves a margin of 28x below
#: the least of them, while a short fragment of a motion (0.78 s of a reach: 1.1 cm) is still
#: read, and warned of by `teleop train` as much shorter than its task's takes.
MIN_HAND_MOTION_M = 0.005


def hand_motion_m(traj: ReferenceTrajectory) -> float:
    """The largest distance [m] a hand's reference gets from its first-frame position."""
    values = np.asarray(traj.values, dtype=float)[:, list(HAND_INDICES)]
    hands = values.reshape(len(values), -1, 3)
    return float(np.linalg.norm(hands - hands[:1], axis=2).max()) if len(values) else 0.0


def reference_problem(traj: ReferenceTrajectory, envelope: ReferenceEnvelope) -> str | None:
    """Why the robot references ``traj`` cannot be a motion of the robot, or None.

    A non-finite value, or a frame outside ``envelope``: the bounds beyond which the robot
    station refuses a command as a fault upstream (a unit mistake, a corrupted file, see
    :mod:`retarget.envelope`). Learned, such a take gave a library whose robot would be sent
    to the far values (a hand at 1e6 m trained with exit code 0), or failed deep in the
    learning without naming the take (1e300: "noise_var must be finite"). The answer names
    the first bad frame and its signal."""
    values, times = np.asarray(traj.values, dtype=float), np.asarray(traj.times, dtype=float)
    bad = ~np.isfinite(values).all(axis=1) | ~np.isfinite(times)
    if bad.any():
        frame = int(np.argmax(bad))
        signals = [FLAT_LABELS[i] for i in np.flatnonzero(~np.isfinite(values[frame]))] or ["time"]
        return f"non-finite values (NaN or inf) at frame {frame} of {len(bad)} ({', '.join(signals)})"
    outside = envelope.first_violation(values)
    if outside is not None:
        frame, why = outside
        return (f"frame {frame} of {len(values)}: {why}, which the robot station refuses as a command (a "
                "unit mistake, or a fault where the file was made)")
    return None


def _export_command(path: Path) -> str:
    """The export that makes takes of recording ``path``: a robot station's has no
    /references, and the plain command it was told failed on it ("no channel /references");
    its commands are exported with --channel delivered."""
    from teleop.record.channels import COMMANDS_DELIVERED, REFERENCES
    from teleop.record.mcap_index import RecordingFormatError
    from teleop.record.reader import open_recording

    try:
        channels = open_recording(path).channels
    except (RecordingFormatError, OSError, ValueError):   # said by the export itself
        channels = {}
    delivered = REFERENCES not in channels and COMMANDS_DELIVERED in channels
    # Quoted: a command to paste, whatever the path holds (a space, a quote).
    return f"teleop dataset export {shlex.quote(str(path))}{' --channel delivered' if delivered else ''} -o DIR"


def load_take(path: Path, label: str, target: RobotTarget, rate_hz: float | None = None) -> Take:
    """Read and retarget one take (reference trajectories are read as they are), checked
    where the file is known, so that the error can name it: at least
    :data:`MIN_TAKE_FRAMES` frames at increasing times, and references the robot station
    would execute (:func:`reference_problem`), and hands that move at least
    :data:`MIN_HAND_MOTION_M`. Raises ValueError."""
    path = Path(path)
    if path.suffix.lower() == ".mcap":
        # A take is robot references: what `dataset export` writes of a recording's episodes.
        raise ValueError(f"{path}: a recording, not a motion file: export its labelled episodes first "
                         f"({_export_command(path)}) and give DIR")
    retargeted = not (path.suffix == ".npz" and _is_reference_npz(path))
    note = None
    if not retargeted:
        traj = ReferenceTrajectory.load_npz(path)
        note = robot_note(path)
    else:
        motion = read_motion_file(path, rate_hz)
        # A finite but absurd input (a coordinate of 1e300) overflows here: said below, by
        # frame and signal, instead of as numpy's RuntimeWarning.
        with np.errstate(over="ignore", invalid="ignore"):
            traj = retarget_motion(motion, target)
    # Else a NaN surfaced while learning as "demonstration values must be finite", and a
    # value far out of range as "noise_var must be finite", without saying which take.
    problem = reference_problem(traj, ReferenceEnvelope.for_target(target))
    if problem and problem.startswith("non-finite"):
        raise ValueError(problem)
    # Else these surface while learning, as "a demonstration needs >= 2 samples ...".
    n = len(traj.times)
    if n < MIN_TAKE_FRAMES:
        took = f" ({traj.times[-1] - traj.times[0]:.2g} s)" if n > 1 else ""
        raise ValueError(f"{n} frame{'s' if n != 1 else ''}{took}: a take needs at least {MIN_TAKE_FRAMES} frames "
                         "(a shorter one is a fragment, not a motion: it would skew its task's mean motion and "
                         "speed range)")
    if not np.all(np.diff(traj.times) > 0):
        raise ValueError(f"time does not increase at frame {int(np.argmax(np.diff(traj.times) <= 0)) + 1}")
    if problem:
        raise ValueError(problem)
    moved = hand_motion_m(traj)
    if moved < MIN_HAND_MOTION_M:
        raise ValueError(f"no motion: its hands move {100 * moved:.2g} cm at most from where they start, less "
                         f"than the {100 * MIN_HAND_MOTION_M:g} cm a take must move (a take frozen at its first frame, "
                         "or of someone standing still: learned or scored as a motion, it would skew its task)")
    traj.label = label
    traj.source = str(path)
    return Take(path, label, performer_of(path), traj, retargeted, note)


def select_take_files(files: Iterable[tuple[Path, str]], *, performers: Sequence[str] | None = None,
                      exclude_performers: Sequence[str] = (),
                      tasks: Sequence[str] | None = None) -> list[tuple[Path, str]]:
    """The (file, label) pairs that pass the performer and task filters."""
    return [(f, label) for f, label in files
            if (tasks is None or label in tasks)
            and (performers is None or performer_of(f) in performers)
            and performer_of(f) not in exclude_performers]


def load_take_files(files: Sequence[tuple[Path, str]], target: RobotTarget, rate_hz: float | None = None,
                    progress: bool = True, desc: str = "reading") -> list[Take]:
    """Read and retarget (file, label) pairs; an unreadable file's error starts with its path."""
    takes = []
    for path, label in progress_bar(files, desc=desc, enabled=progress):
        try:
            takes.append(load_take(path, label, target, rate_hz))
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__
            if str(path) in reason:   # the reader named the file already
                raise
            raise ValueError(f"{path}: {reason}") from exc
    return takes


def load_takes(root: Path, target: RobotTarget, *, performers: Sequence[str] | None = None,
               exclude_performers: Sequence[str] = (), tasks: Sequence[str] | None = None,
               rate_hz: float | None = None, progress: bool = True) -> list[Take]:
    """All takes under ``root``, optionally filtered by performer and task."""
    files = select_take_files(list_take_files(root), performers=performers,
                              exclude_performers=exclude_performers, tasks=tasks)
    return load_take_files(files, target, rate_hz, progress, desc=f"reading {Path(root).name}")


def split_csv(text: str | None) -> list[str] | None:
    """"a,b" -> ["a", "b"]; None or "" -> None."""
    if not text:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def trajectories(takes: Iterable[Take]) -> list[ReferenceTrajectory]:
    return [t.trajectory for t in takes]


def check_take_kinds(files: list[tuple[Path, str]]) -> None:
    """Refuse (ValueError naming the file) a listed take that is no motion: a ProMP task
    library, a recording, a file of no motion format. Cheap (an archive's directory or a
    file's first bytes), so it runs before the task labels are compared: a single file
    given as --train is labelled by its folder, and a library or a stray file then
    failed as "test take ... is of task 'squat', which the training takes do not have
    (tasks: <its folder>)", a wrong diagnosis that hid the file's own problem. Shared by
    ``eval promp`` and ``trial``."""
    for path, _ in files:
        suffix = path.suffix.lower()
        if suffix == ".mcap":   # load_take's message, said before the labels are compared
            raise PreconditionError(f"{path}: a recording, not a motion file: export its labelled episodes first "
                                    f"({_export_command(path)}) and give DIR")
        if suffix != ".npz":
            sniff_format(path)            # "unsupported motion format", "empty file", ...
            continue
        kind = _npz_kind(path)
        if kind == "references":          # robot references are takes as they are
            continue
        check_human_motion_file(path)     # a task library
        if kind is None:
            # Not an archive of ours: the motion reader says what is wrong with it (it
            # fails at once on such a file), prefixed by the path as load_take_files does.
            try:
                read_motion_file(path)
            except (OSError, ValueError, EOFError) as exc:
                reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) \
                    or type(exc).__name__
                if str(path) in reason:
                    raise
                raise ValueError(f"{path}: {reason}") from exc
