"""Task labels: relabel an episode, or add a labelled episode to a recording.

A station recording (``teleop operator --record FILE``) holds episodes only if the record
button was pressed, and only labelled episodes become training data. :func:`add_episode`
gives such a recording an episode over all of it, or over a window in seconds from its
first message (the convention of ``teleop dataset trim``), labelled with the task;
:func:`relabel_episode` changes the label of an existing one.

A label is the name of its task's folder in an export, the task ``teleop train`` learns:
:func:`task_problem` refuses one that :func:`task_folder_name` would change (two such labels
could share a folder) or longer than :data:`MAX_TASK_BYTES`. :func:`printable_label` escapes
what a terminal cannot print of a label read from a file.

:func:`add_episode` and :func:`relabel_episode` only compute the new episode list:
:func:`teleop.record.rewrite.write_copy` writes it
(MCAP is append-only, so a labelled recording is a complete new file).
"""

from __future__ import annotations

import math
import re

from .reader import Episode, Recording

#: Longest task label [bytes of UTF-8]. A label names its folder in an export, which file
#: systems limit to 255 bytes (a 300-character label was accepted, and broke the export),
#: and a column of every listing.
MAX_TASK_BYTES = 100
#: What a task label may hold, as the refusals say it (see :func:`task_folder_name`).
TASK_CHARACTERS = "letters, digits and _ - + . (no space; no . or _ first or last)"


def task_folder_name(task: str) -> str:
    """The folder ``teleop dataset export`` writes a task's episodes to (``OUTDIR/<folder>/``,
    the task ``teleop train`` learns): ``task`` with path separators and odd characters
    replaced, so that no label escapes the export folder or names an unusable one."""
    return re.sub(r"[^\w.+-]+", "_", task.strip()).strip("._") or "unnamed"


def task_problem(task: str) -> str | None:
    """Why ``task`` cannot label an episode, or None if it can.

    A label is refused if :func:`task_folder_name` would change it: the folder is what
    ``teleop train`` learns the task as, and changed names merge tasks (``pick up`` and
    ``pick_up`` both became ``pick_up/``, every emoji ``unnamed/``; a label with spaces
    around it was stored as typed and exported without them). Labels longer than :data:`MAX_TASK_BYTES` are refused
    too. Recordings labelled otherwise (older ones, other tools') are still exported; the
    export refuses labels that would share a folder.
    """
    if not task.strip():
        return "the task name must not be empty"
    size = len(task.encode("utf-8", "surrogatepass"))
    if size > MAX_TASK_BYTES:
        return (f"'{printable_label(task[:24])}...' is {size} bytes long: a task name is at most {MAX_TASK_BYTES} "
                "bytes (it names a folder of an exported dataset)")
    folder = task_folder_name(task)
    if folder != task:
        example = f", e.g. {folder}" if folder != "unnamed" else ""
        return (f"'{printable_label(task)}': a task name is a folder name in an exported dataset, where this one "
                f"would become '{folder}' (and another label could share it): use {TASK_CHARACTERS}{example}")
    return None


def printable_label(task: str) -> str:
    """``task`` with its non-printable characters escaped (a newline as ``\\n``, ESC as
    ``\\x1b``), for printing. Labels come from files any tool may have written: printed raw,
    a newline broke the listing's table and an escape sequence coloured the terminal."""
    if task.isprintable():
        return task
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in task)


def _check_task(task: str) -> None:
    """Refuse (ValueError) a label :func:`task_problem` finds wrong."""
    problem = task_problem(task or "")
    if problem is not None:
        raise ValueError(problem)


def window_ns(recording: Recording, start_s: float | None = None, end_s: float | None = None) -> tuple[int, int]:
    """(start, stop) log times [ns] of a window given in seconds from the first message.

    Args:
        start_s: window start [s from the first message]; None = the first message.
        end_s: window end, inclusive [s from the first message]; None = the last message.
            An end past the recording is clipped to its last message.

    Raises ValueError, naming the file, if the window is backwards or holds no message.
    """
    origin, last = recording.start_ns, recording.end_ns
    for name, value in (("start", start_s), ("end", end_s)):
        if value is not None and not math.isfinite(value):   # round() of inf: OverflowError
            raise ValueError(f"{recording.path}: the {name} ({value} s) is not a finite number of seconds")
    if recording.message_count == 0:
        raise ValueError(f"{recording.path}: the recording holds no messages: nothing to label")
    start_ns = origin if start_s is None else origin + round(start_s * 1e9)
    stop_ns = last if end_s is None else min(last, origin + round(end_s * 1e9))
    if start_s is not None and end_s is not None and end_s < start_s:
        raise ValueError(f"{recording.path}: the end ({end_s:g} s) comes before the start ({start_s:g} s)")
    if stop_ns < start_ns or next(iter(recording.messages(None, start_ns, stop_ns + 1)), None) is None:
        raise ValueError(f"{recording.path}: no messages from {_requested_window(start_s, end_s)} "
                         f"(the recording spans 0 s .. {recording.duration_s:.3f} s)")
    return start_ns, stop_ns


def _requested_window(start_s: float | None, end_s: float | None) -> str:
    """The window as asked for: the end before clipping, which would hide what was wrong."""
    start = "the first message" if start_s is None else f"{start_s:g} s"
    end = "the last message" if end_s is None else f"{end_s:g} s"
    return f"{start} to {end}"


def add_episode(recording: Recording, task: str, start_s: float | None = None,
                end_s: float | None = None) -> tuple[list[Episode], Episode]:
    """The recording's episodes plus a new one labelled ``task`` over a window.

    The window is :func:`window_ns` (whole recording by default, end inclusive). The new
    episode gets the next free number; existing episodes are kept as they are (episodes may
    overlap: each is cut out of the recording on its own).

    Returns (all episodes, the new one).
    """
    _check_task(task)
    start_ns, stop_ns = window_ns(recording, start_s, end_s)
    episodes = recording.episodes()
    number = max((ep.number for ep in episodes), default=-1) + 1
    new = Episode(number, task, start_ns, stop_ns, stopped=True)
    return episodes + [new], new


def relabel_episode(recording: Recording, number: int, task: str) -> tuple[list[Episode], str]:
    """The recording's episodes with episode ``number`` labelled ``task``.

    Returns (all episodes, the previous label). Raises ValueError, naming the file and
    the episodes there are, if there is no episode ``number``.
    """
    _check_task(task)
    episodes = recording.episodes()  # fresh objects: the recording is not changed
    for ep in episodes:
        if ep.number == number:
            previous, ep.task = ep.task, task
            return episodes, previous
    numbers = [ep.number for ep in episodes]
    raise ValueError(f"{recording.path}: no episode {number} (episodes: {numbers or 'none'})")
