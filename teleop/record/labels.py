"""Task labels: relabel an episode, or add a labelled episode to a recording.

A station recording (``teleop operator --record FILE``) holds episodes only if the record
button was pressed, and only labelled episodes become training data. :func:`add_episode`
gives such a recording an episode over all of it, or over a window in seconds from its
first message (the convention of ``teleop dataset trim``), labelled with the task;
:func:`relabel_episode` changes the label of an existing one.

Both only compute the new episode list: :func:`teleop.record.rewrite.write_copy` writes it
(MCAP is append-only, so a labelled recording is a complete new file).
"""

from __future__ import annotations

from .reader import Episode, Recording


def _check_task(task: str) -> None:
    if not task or not task.strip():
        raise ValueError("the task name must not be empty")


def window_ns(recording: Recording, start_s: float | None = None, end_s: float | None = None) -> tuple[int, int]:
    """(start, stop) log times [ns] of a window given in seconds from the first message.

    Args:
        start_s: window start [s from the first message]; None = the first message.
        end_s: window end, inclusive [s from the first message]; None = the last message.
            An end past the recording is clipped to its last message.

    Raises ValueError, naming the file, if the window is backwards or holds no message.
    """
    origin, last = recording.start_ns, recording.end_ns
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
