"""Crash tolerance (a real SIGKILL, files cut at any byte) and clear errors for wrong files."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from mcap.reader import make_reader

from retarget.references import FLAT_SIZE, RobotReferences
from teleop.record import Recorder, RecordingFormatError, open_recording, recover
from teleop.record import dataset_cli

REPO_ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    from retarget.references import FLAT_SIZE, RobotReferences
    from teleop.record import Recorder

    rec = Recorder(sys.argv[1])  # wall clock (time.time_ns), default 0.5 s flush
    rec.start_episode("squat")
    start = time.monotonic()
    i = 0
    while True:
        rec.log_references(RobotReferences.from_flat(i * 0.01, np.full(FLAT_SIZE, float(i))))
        # What was logged when (after the recorder stamped it): the loss is measured against
        # this, not against the time of the kill, which a descheduled child would inflate.
        print("logged", i, time.time_ns(), flush=True)
        i += 1
        # Absolute schedule: a late tick is caught up, so the count tracks elapsed time.
        delay = start + i * 0.01 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
""")


def test_sigkill_loses_at_most_one_second(tmp_path):
    path = tmp_path / "killed.mcap"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True,
                             env=env, cwd=REPO_ROOT)
    try:
        line = child.stdout.readline()
        assert line.startswith("logged 0 "), line
        time.sleep(2.0)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        rest = child.stdout.read()
        # Complete lines only: the kill can cut the child's last line short ("logged 199").
        lines = [line, *rest.splitlines()[:None if rest.endswith("\n") else -1]]
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    logged_ns = [int(ln.split()[2]) for ln in lines if ln.startswith("logged ")]
    assert len(logged_ns) >= 10, lines[-3:]         # (a loaded machine may run the child slowly)
    last_ns = logged_ns[-1]
    recording = open_recording(path)
    assert not recording.complete
    count = recording.channel("references").count
    # Everything logged more than a second before the last message the child logged is in the
    # file. Against the child's own log, not the kill's wall-clock time: a child descheduled on
    # a loaded machine logs nothing meanwhile, so loses nothing for it.
    older = sum(1 for ns in logged_ns if ns <= last_ns - 1_000_000_000)
    assert count >= older, (count, older, len(logged_ns))
    assert (last_ns - recording.end_ns) * 1e-9 <= 1.0, (count, len(logged_ns))
    values = recording.reference_trajectory().values
    np.testing.assert_array_equal(values[:, 0], np.arange(count))  # in order, nothing missing before the tail
    [episode] = recording.episodes()
    assert episode.task == "squat" and not episode.stopped

    report = recover(path, tmp_path / "repaired.mcap")
    assert report.messages == recording.message_count and not report.complete
    with open(tmp_path / "repaired.mcap", "rb") as f:  # complete again: the plain mcap reader opens it
        reader = make_reader(f)
        assert reader.get_summary() is not None
        assert sum(1 for _ in reader.iter_messages(topics=["/references"])) == count


def test_file_cut_at_any_byte_opens_with_what_precedes(tmp_path):
    path = tmp_path / "full.mcap"
    clock = {"t": 0}
    with Recorder(path, clock_ns=lambda: clock["t"], threaded=False, chunk_size_bytes=2000) as rec:
        for i in range(200):
            clock["t"] = i * 10_000_000
            rec.log_references(RobotReferences.from_flat(i * 0.01, np.full(FLAT_SIZE, float(i))))
    data = path.read_bytes()
    header_end = 8 + 9 + int.from_bytes(data[9:17], "little")
    cut_path = tmp_path / "cut.mcap"
    previous = 0
    for cut in list(range(header_end, len(data), 61)) + [len(data) - 1]:
        cut_path.write_bytes(data[:cut])
        recording = open_recording(cut_path)
        messages = list(recording.messages())
        assert len(messages) == recording.message_count >= previous
        assert [m.sequence for m in messages] == list(range(len(messages)))  # a prefix, in order
        previous = len(messages)
    assert previous == 200  # only the summary was cut


def test_damaged_tail_is_dropped(tmp_path):
    path = tmp_path / "damaged.mcap"
    with Recorder(path, threaded=False, chunk_size_bytes=2000) as rec:
        for i in range(100):
            rec.log_references(RobotReferences.from_flat(i * 0.01, np.zeros(FLAT_SIZE)), log_time_ns=i)
    data = bytearray(path.read_bytes())
    recording = open_recording(path)
    last_chunk = recording.index.blocks[-1]
    in_last_chunk = len(list(recording.messages(start_ns=last_chunk.start_ns)))
    data[last_chunk.offset + 60:last_chunk.offset + 80] = bytes(20)  # corrupt its compressed bytes
    del data[last_chunk.offset + last_chunk.body_length + 9:]  # and lose the summary
    path.write_bytes(bytes(data))
    damaged = open_recording(path)
    assert 0 < in_last_chunk < 100
    assert damaged.message_count == 100 - in_last_chunk
    assert "damaged chunk record" in damaged.problem


@pytest.mark.parametrize("content, expected", [
    (b"", "truncated MCAP file"),
    (b"\x89MCA", "truncated MCAP file"),
    (b"time,x,y\n0.0,1.0,2.0\n", "not an MCAP recording (it does not begin with MCAP's 8-byte signature; it "
     "looks like a text file)"),
    (b"PK\x03\x04\x14\x00\x00\x00\x08\x00", "it looks like a zip archive, e.g. an .npz"),
    (b"\x89MCAP0\r\n", "header record missing"),
    (b"\x89MCAP0\r\n\x01\x40\x00\x00\x00\x00\x00\x00\x00abc", "header record cut short"),
    (b"\x89MCAP0\r\n\x05\x00\x00\x00\x00\x00\x00\x00\x00", "expected a header"),
])
def test_wrong_files_give_a_clear_error_naming_the_file(tmp_path, content, expected):
    path = tmp_path / "session.mcap"
    path.write_bytes(content)
    with pytest.raises(RecordingFormatError) as info:
        open_recording(path)
    assert str(path) in str(info.value) and expected in str(info.value)


def test_cli_reports_wrong_files_and_missing_files(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("not a recording\n")
    assert dataset_cli.main(["inspect", str(text)]) == 1
    err = capsys.readouterr().err
    assert str(text) in err and "not an MCAP recording" in err
    assert dataset_cli.main(["inspect", str(tmp_path / "missing.mcap")]) == 1
    assert "missing.mcap" in capsys.readouterr().err


def test_recorder_closed_without_close_leaves_a_readable_file(tmp_path):
    """A process that exits without close(): no footer, but the flushed data reads back."""
    path = tmp_path / "abandoned.mcap"
    rec = Recorder(path, flush_interval_s=0.05, threaded=False)
    for i in range(50):
        rec.log_references(RobotReferences.from_flat(i * 0.01, np.zeros(FLAT_SIZE)), log_time_ns=i)
    time.sleep(0.06)
    rec.log_references(RobotReferences.from_flat(1.0, np.zeros(FLAT_SIZE)), log_time_ns=50)  # triggers the flush
    recording = open_recording(path)
    assert not recording.complete and recording.message_count == 51
    rec.close()
    assert open_recording(path).complete


def test_an_interrupt_while_closing_still_finishes_the_file(tmp_path):
    """A second Ctrl-C / SIGTERM arriving while close() waited for the writer thread used to
    abandon it: the interpreter killed the daemon thread mid-summary, no footer."""
    path = tmp_path / "interrupted.mcap"
    rec = Recorder(path)
    for i in range(200):
        rec.log("references", RobotReferences.from_flat(i * 0.01, np.zeros(FLAT_SIZE)), log_time_ns=i * 10_000_000)
    writer = rec._thread

    class InterruptedOnce:                      # the signal lands in the first join()
        calls = 0

        def is_alive(self):
            return writer.is_alive()

        def join(self):
            InterruptedOnce.calls += 1
            if InterruptedOnce.calls == 1:
                raise KeyboardInterrupt
            writer.join()

    rec._thread = InterruptedOnce()
    with pytest.raises(KeyboardInterrupt):
        rec.close()
    recording = open_recording(path)
    assert recording.complete and len(list(recording.messages("references"))) == 200


def test_record_command_survives_a_duplicate_sigterm(tmp_path):
    """`timeout` and service managers send SIGTERM twice; `teleop record` had its own handler,
    so the second one interrupted close(): a traceback and (mostly) a file without footer."""
    path = tmp_path / "twice.mcap"
    proc = subprocess.Popen([sys.executable, "-m", "teleop", "record", "-o", str(path), "--task", "wave"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        for _ in range(600):                     # bounded wait for the first flush (polls, not time)
            if path.exists() and path.stat().st_size > 2000:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.001)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "(interrupted)" in out
    assert open_recording(path).complete


def _raw_mcap(path, channel_id_of_messages, com_xy):
    """An MCAP with one references message, written with the low-level mcap writer."""
    import json
    from mcap.writer import Writer
    from teleop.record.codecs import REFERENCES_SCHEMA, REFERENCES_SCHEMA_NAME, encode_references
    refs = RobotReferences.from_flat(0.2, np.zeros(FLAT_SIZE))
    data = json.loads(encode_references(refs))
    data["com_xy"] = com_xy
    with open(path, "wb") as f:
        w = Writer(f)
        w.start()
        schema = w.register_schema(REFERENCES_SCHEMA_NAME, "jsonschema", json.dumps(REFERENCES_SCHEMA).encode())
        channel = w.register_channel("/references", "json", schema)
        w.add_message(channel if channel_id_of_messages is None else channel_id_of_messages,
                      200_000_000, json.dumps(data).encode(), 200_000_000)
        w.finish()
    return path


def test_a_references_message_with_a_wrong_shaped_field_is_a_recording_format_error(tmp_path):
    # Before: the decoder passed com_xy with 3 values, reference_trajectory then raised a
    # plain ValueError (broadcast) in retarget/references.py.
    good = open_recording(_raw_mcap(tmp_path / "good.mcap", None, [0.0, 0.0]))
    assert len(good.reference_trajectory("references").times) == 1
    path = _raw_mcap(tmp_path / "bad.mcap", None, [0.0, 0.0, 0.0])
    with pytest.raises(RecordingFormatError, match="/references .*com_xy must have 2 numbers") as e:
        open_recording(path).reference_trajectory("references")
    assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)


def test_recover_refuses_messages_on_a_channel_id_no_channel_record_defines(tmp_path):
    # Before: KeyError in rewrite (channel_ids[message.channel_id]).
    path = _raw_mcap(tmp_path / "chan.mcap", 8, [0.0, 0.0])
    with pytest.raises(RecordingFormatError, match="channel id 8") as e:
        recover(path, tmp_path / "out.mcap")
    assert str(e.value).startswith(f"{path}: ")


def test_a_recovered_copy_keeps_the_recorders_chunk_size(tmp_path):
    """The copy was written in chunks of 4 MB of messages, the recording in chunks of 1 MB: a reader
    seeking to a moment of it decompressed four times what it did in the original."""
    from teleop.inputs.synthetic import generate

    motion = generate("squat", seed=1, rate_hz=100.0)
    session = tmp_path / "session.mcap"
    # Chunks closed by size alone: a wall-clock flush (every 0.5 s) on a loaded machine cut the
    # recording into more, smaller chunks (22) than the copy's size-closed ones (20).
    with Recorder(session, threaded=False, flush_interval_s=1e6) as rec:
        for k in range(len(motion)):
            for repeat in range(8):
                rec.log_operator_input(motion, k, log_time_ns=int(motion.times[k] * 1e9) + 1 + repeat)
    crashed = tmp_path / "crashed.mcap"
    crashed.write_bytes(session.read_bytes()[: session.stat().st_size * 9 // 10])

    def chunks(path: Path) -> int:
        return sum(block.is_chunk for block in open_recording(path).index.blocks)

    recover(crashed, tmp_path / "copy.mcap", progress=False)
    assert chunks(crashed) >= 10
    assert chunks(tmp_path / "copy.mcap") >= chunks(crashed) - 1
