"""A hang-up (the terminal closed, the ssh session dropped, ``kill -HUP``) stops a command as
SIGTERM does: the cleanup runs, the recording gets its footer, the final statistics are
printed, or, when the terminal that would show them is gone, dropped without a traceback.
Before, SIGHUP killed the process outright: no statistics, a recording without footer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import free_port
from teleop.record import open_recording

REPO_ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this platform")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
            "TELEOP_SECRET": "sighup-test-secret-0123456789abcdef"}


def _hangup_at_default() -> None:
    """In the child, before it runs: SIGHUP at its default, as a command started from a
    terminal has it. The tests may run under ``nohup`` (a CI job), whose ignored SIGHUP the
    child would inherit and, rightly, keep ignored."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _wait_for_data(path: Path, proc: subprocess.Popen, size: int = 2000) -> None:
    """Until ``path`` holds a first flush (polls, bounded: not a time measurement)."""
    for _ in range(1200):
        if proc.poll() is not None or (path.exists() and path.stat().st_size > size):
            return
        time.sleep(0.05)


def _record_and_stop(path: Path, sig: signal.Signals) -> tuple[int, str, str]:
    proc = subprocess.Popen([sys.executable, "-m", "teleop", "record", "-o", str(path), "--task", "wave"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            preexec_fn=_hangup_at_default)
    try:
        _wait_for_data(path, proc)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def test_sighup_is_an_interrupt_inside_a_command_only():
    from teleop.cli import sigterm_as_interrupt

    def not_an_interrupt(signum, frame):   # instead of the default, which would end pytest
        raise AssertionError("SIGHUP was not turned into KeyboardInterrupt")

    before = signal.signal(signal.SIGHUP, not_an_interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            with sigterm_as_interrupt():
                os.kill(os.getpid(), signal.SIGHUP)
                time.sleep(5.0)      # the handler runs at once; the sleep is never finished
        assert signal.getsignal(signal.SIGHUP) is not_an_interrupt
    finally:
        signal.signal(signal.SIGHUP, before)


def test_an_ignored_sighup_stays_ignored():
    """Under ``nohup`` the user asked the command to outlive its terminal."""
    from teleop.cli import sigterm_as_interrupt

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with sigterm_as_interrupt():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, before)


def test_sighup_stops_the_recorder_as_sigterm_does(tmp_path):
    term = _record_and_stop(tmp_path / "term.mcap", signal.SIGTERM)
    hup = _record_and_stop(tmp_path / "hup.mcap", signal.SIGHUP)
    assert hup[0] == term[0] == 0, hup[2][-2000:]          # before: -1, killed by the signal
    assert "(interrupted)" in hup[1] and "Traceback" not in hup[2]
    recording = open_recording(tmp_path / "hup.mcap")
    assert recording.complete                              # before: "recovered (no footer)"
    assert recording.message_count > 0


def test_sighup_stops_the_robot_station_cleanly(tmp_path):
    """The station's final statistics come and its recording is closed complete, as after
    SIGTERM (tests/test_station_record.py), with no operator connected."""
    path = tmp_path / "robot.mcap"
    proc = subprocess.Popen([sys.executable, "-m", "teleop", "robot", "--listen", f"127.0.0.1:{free_port()}",
                             "--video-to", f"127.0.0.1:{free_port()}", "--video-hz", "0", "--json",
                             "--record", str(path)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            preexec_fn=_hangup_at_default)
    try:
        _wait_for_data(path, proc)
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-2000:]
    assert "network" in json.loads(out.strip().splitlines()[-1])     # the final statistics
    assert open_recording(path).complete


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="hangs up a pseudo-terminal the Linux way")
def test_a_closed_terminal_stops_the_recorder_cleanly(tmp_path):
    """The real thing: the recorder runs on a terminal that is then closed. The kernel sends
    SIGHUP, and the statistics the recorder prints as it stops meet a hung-up terminal
    (EIO): it must still close its file and exit 0, not die on a traceback it cannot show."""
    import fcntl
    import termios

    path = tmp_path / "closed.mcap"
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "teleop", "record", "-o", str(path), "--task", "wave"],
                                cwd=REPO_ROOT, stdin=slave, stdout=slave, stderr=slave, env=_env(),
                                start_new_session=True,    # its own session, this terminal its own
                                preexec_fn=lambda: (_hangup_at_default(), fcntl.ioctl(0, termios.TIOCSCTTY, 0)))
    finally:
        os.close(slave)
    try:
        _wait_for_data(path, proc)
        assert proc.poll() is None, "the recorder ended before the terminal closed"
        os.close(master)                    # the terminal window closes
        master = None
        proc.wait(timeout=60)
    finally:
        if master is not None:
            os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0             # before: -1 (killed), or 1 after a failed "error:" message
    assert open_recording(path).complete


def test_a_station_whose_log_reader_goes_away_runs_its_session_to_the_end(tmp_path):
    """`teleop robot 2>&1 | head -1`, or a `tee` that was killed: the reader of the station's
    output is gone, the station is not. It stopped at its next line (EPIPE, exit code 0,
    its recording cut at the first second); the robot's session must not depend on anybody
    reading its log: it runs its --duration and closes its recording complete."""
    path = tmp_path / "robot.mcap"
    duration_s = 4.0
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "teleop", "robot", "--listen", f"127.0.0.1:{free_port()}",
                             "--video-to", f"127.0.0.1:{free_port()}", "--video-hz", "0", "--record", str(path),
                             "--duration", str(duration_s)],
                            cwd=tmp_path, stdout=write_end, stderr=write_end, env=_env())
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as reader:
            reader.read(1)              # the first byte of its log, then the reader goes
        returncode = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert returncode == 0
    recording = open_recording(path)
    assert recording.complete
    times = recording.robot_states(time_origin_ns=recording.start_ns).times
    assert times[-1] >= duration_s - 0.1, f"stopped after {times[-1]:.2f} s of {duration_s} s"
