"""Recording outputs: a file name the dataset commands would not find is refused, and a
recorder that cannot write says which file and leaves nothing behind."""

import importlib.util
from pathlib import Path

import pytest

from conftest import error_line
from teleop.cli import main
from teleop.record.recorder import Recorder


@pytest.mark.parametrize("command", [["record", "--duration", "0.1", "-o"],
                                     ["robot", "--duration", "0.1", "--record"],
                                     ["operator", "--duration", "0.1", "--record"]])
def test_a_recording_without_the_mcap_suffix_is_refused_before_starting(tmp_path, capsys, command):
    """`teleop dataset list/export FOLDER` find recordings by .mcap: a session recorded as
    `session` was passed over."""
    out = tmp_path / "session"
    assert main([*command, str(out)]) == 2
    option = command[-1]
    assert error_line(capsys.readouterr().err) == (
        f"{option} {out}: give a .mcap file name (`teleop dataset list/export FOLDER` "
        "find recordings by it)")
    assert not out.exists()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_recorder_that_cannot_write_its_header_names_the_file_and_spares_the_device():
    with pytest.raises(OSError) as error:
        Recorder(Path("/dev/full"))
    assert error.value.filename == "/dev/full" and "No space left" in str(error.value)
    assert Path("/dev/full").exists() and not Path("/dev/full").is_file()   # a device: never unlinked


_FULL_DISK_SESSION = """
import os, resource, signal, sys, time
import numpy as np
from retarget.references import RobotReferences
from teleop.record import Recorder

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # a write past the limit then fails (EFBIG)
rec = Recorder(sys.argv[1], flush_interval_s=0.05, compression="none")
resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(sys.argv[1]) + 4096, resource.RLIM_INFINITY))
refs = RobotReferences.from_flat(0.0, np.zeros(20))
deadline = time.monotonic() + 30
while rec.log_references(refs) and time.monotonic() < deadline:
    time.sleep(0.002)
time.sleep(0.3)
start = time.process_time()
time.sleep(1.0)
print(time.process_time() - start)
"""


@pytest.mark.skipif(importlib.util.find_spec("resource") is None, reason="needs RLIMIT_FSIZE (POSIX)")
def test_a_recorder_whose_disk_filled_stays_idle(tmp_path):
    """After a write error the writer thread spun (its flush deadline was never advanced):
    ~70 % of a core, the stations' control loops starved of the GIL, the robot's watchdog
    stale while the operator sent at 100 Hz. Idle now: the CPU this process uses in a second
    of sleep is the writer's; a spin takes the whole second."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FULL_DISK_SESSION, str(tmp_path / "full.mcap")],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) < 0.3, done.stdout


@pytest.mark.parametrize("threaded", [True, False])
def test_a_recording_whose_folder_is_deleted_mid_session_is_an_error_not_a_silent_loss(tmp_path, threaded):
    """`rm -rf` of the recording's folder during a session: it ended with exit code 0 and no
    word, and the recording existed nowhere. Found at the next flush (the station says so
    then) and at close, with the error that makes the command exit 1."""
    import shutil
    import time

    import numpy as np

    from retarget.references import FLAT_SIZE, RobotReferences
    from teleop.record.recorder import RecordingWriteError

    folder = tmp_path / "session"
    folder.mkdir()
    recorder = Recorder(folder / "s.mcap", flush_interval_s=0.05, threaded=threaded)
    recorder.log_references(RobotReferences.from_flat(0.0, np.zeros(FLAT_SIZE)), log_time_ns=1)
    shutil.rmtree(folder)
    for k in range(40):                       # the next flushes find it gone
        recorder.log_references(RobotReferences.from_flat(0.01 * k, np.zeros(FLAT_SIZE)), log_time_ns=2 + k)
        time.sleep(0.01)
        if recorder.error is not None:
            break
    assert recorder.error is not None and "removed or replaced while recording" in str(recorder.error)
    with pytest.raises(RecordingWriteError, match="this session's recording is lost"):
        recorder.close()


def test_messages_logged_from_several_threads_are_written_in_their_sequence_order(tmp_path):
    """The sequence number was taken under the recorder's lock and the message queued after
    it: two loggers could queue in the opposite order (7 inversions in 10 000 messages),
    which a reader counting lost messages by sequence gaps misreads."""
    import sys
    import threading

    from teleop.record.reader import open_recording

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)                  # threads switch as often as they can
    try:
        recorder = Recorder(tmp_path / "race.mcap", max_queued_messages=100_000)

        def log(k: int) -> None:
            for i in range(2000):
                recorder.log_network_stats({"k": k, "i": i})

        threads = [threading.Thread(target=log, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        recorder.close()
    finally:
        sys.setswitchinterval(previous)
    sequences = [message.sequence for message in open_recording(tmp_path / "race.mcap").messages("network_stats")]
    assert len(sequences) == 8000 and sequences == sorted(sequences)


def test_a_live_recording_is_locked_against_a_second_recorder(tmp_path, capsys):
    """`teleop record -o F --force` emptied F under a session still writing it; nothing could
    tell such a file from one whose recorder crashed."""
    import errno

    from teleop.record.file_lock import being_written

    live = tmp_path / "live.mcap"
    first = Recorder(live, threaded=False, flush_interval_s=1e-9)    # every message reaches the file at once
    first.start_episode("squat")
    size = live.stat().st_size
    assert being_written(live)
    with pytest.raises(OSError) as refused:
        Recorder(live)
    assert refused.value.errno == errno.EBUSY and refused.value.filename == str(live)
    for command in (["record", "--duration", "0.1", "-o"], ["robot", "--duration", "0.1", "--record"]):
        assert main([*command, str(live), "--force"]) == 1
        assert error_line(capsys.readouterr().err) == (
            f"{command[-1]} {live} is being written by another recorder (a session under way): choose another file")
    assert live.stat().st_size == size                      # the live session's file untouched
    first.close()
    assert not being_written(live)
    assert main(["record", "--duration", "0.1", "-o", str(live), "--force"]) == 0   # its recorder has gone


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs named pipes (POSIX)")
def test_record_force_refuses_a_named_pipe_at_once(tmp_path, capsys):
    """`teleop record -o pipe.mcap --force` waited for a reader of the pipe for ever."""
    import os

    pipe = tmp_path / "pipe.mcap"
    os.mkfifo(pipe)
    assert main(["record", "--duration", "0.1", "-o", str(pipe), "--force"]) == 1
    assert error_line(capsys.readouterr().err) == f"-o {pipe}: not a regular file (a named pipe): give a file name"


def test_recover_of_a_live_recording_says_the_session_is_under_way(tmp_path, capsys):
    """`dataset recover` of a file still being written said "complete copy written" of a
    session cut at that moment, without a word."""
    live = tmp_path / "live.mcap"
    recorder = Recorder(live, threaded=False, flush_interval_s=1e-9)
    recorder.start_episode("squat")
    assert main(["dataset", "recover", str(live), "-o", str(tmp_path / "copy.mcap")]) == 0
    assert "is still being written (a recorder has it open): the copy holds the session so far" in \
        capsys.readouterr().err
    recorder.close()
    assert main(["dataset", "recover", str(live), "-o", str(tmp_path / "again.mcap")]) == 0
    assert "still being written" not in capsys.readouterr().err


def test_inspect_tells_a_live_recording_from_one_cut_short(tmp_path, capsys):
    """Both were "incomplete (no footer: still being written, or cut short)"."""
    live = tmp_path / "live.mcap"
    recorder = Recorder(live, threaded=False, flush_interval_s=1e-9)
    recorder.start_episode("squat")
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(live.read_bytes())          # the same bytes, no recorder: as after a crash
    assert main(["dataset", "inspect", str(live)]) == 0
    assert "incomplete (still being written: a recorder has it open)" in capsys.readouterr().out
    assert main(["dataset", "inspect", str(cut)]) == 0
    assert "incomplete (no footer: cut short" in capsys.readouterr().out
    recorder.close()
