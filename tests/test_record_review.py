"""Review of teleop/record: files of other tools, damaged complete files, messages of `dataset`."""

import json

import numpy as np
import pytest
from mcap.reader import make_reader
from mcap.writer import IndexType, Writer

from retarget.references import FLAT_SIZE, RobotReferences
from teleop.record import Recorder, RecordingFormatError, open_recording
from teleop.record import dataset_cli


def write_two_channels_on_one_topic(path, **writer_options):
    """Another tool's file: two channels on /x (valid MCAP: e.g. two publishers, or a merge)
    and one on /y, 50 messages each at 100 Hz."""
    with open(path, "wb") as f:
        writer = Writer(f, **writer_options)
        writer.start("", "another tool")
        schema = writer.register_schema("other.Sample", "jsonschema", b"{}")
        first = writer.register_channel("/x", "json", schema, {"publisher": "a"})
        second = writer.register_channel("/x", "json", schema, {"publisher": "b"})
        other = writer.register_channel("/y", "json", schema)
        for i in range(50):
            t = i * 10_000_000
            writer.add_message(first, t, json.dumps({"a": i}).encode(), t, i)
            writer.add_message(second, t + 1, json.dumps({"b": i}).encode(), t + 1, i)
            writer.add_message(other, t + 2, json.dumps({"c": i}).encode(), t + 2, i)
        writer.finish()
    return path


@pytest.mark.parametrize("writer_options", [{}, {"use_chunking": False}, {"index_types": IndexType.NONE}],
                         ids=["chunked", "unchunked", "no-indexes"])
def test_a_topic_on_several_channels_is_read_and_copied_whole(tmp_path, writer_options, capsys):
    """Recording.channels is by topic: the second channel on /x used to replace the first, so
    its messages were neither counted nor copied, and trim/recover/label failed with `error: #1`."""
    path = write_two_channels_on_one_topic(tmp_path / "foreign.mcap", **writer_options)
    recording = open_recording(path)
    assert recording.channel("/x").count == 100 and recording.message_count == 150
    assert [m.data for m in recording.messages("/x")][:2] == [b'{"a": 0}', b'{"b": 0}']
    assert [value for _, value in recording.decoded("/x")][:2] == [{"a": 0}, {"b": 0}]

    copy = tmp_path / "copy.mcap"
    assert dataset_cli.main(["recover", str(path), "-o", str(copy)]) == 0
    trimmed = tmp_path / "trimmed.mcap"
    assert dataset_cli.main(["trim", str(path), "--start", "0.1", "--end", "0.2", "-o", str(trimmed)]) == 0
    capsys.readouterr()
    with open(copy, "rb") as f:  # each message stays on its own channel, with that channel's metadata
        publishers = [channel.metadata.get("publisher")
                      for _, channel, _ in make_reader(f).iter_messages(topics=["/x"])]
    assert publishers.count("a") == publishers.count("b") == 50
    # 0.1 s .. 0.2 s inclusive: ticks 10..20 of /x's first channel, 10..19 of the others.
    assert {t: c.count for t, c in open_recording(trimmed).channels.items()} == {"/x": 21, "/y": 10}


def test_a_complete_file_counted_by_a_scan_has_no_dropped_tail(tmp_path, capsys):
    """A file without indexes is read by a scan, which stops at DataEnd: its summary and footer
    were reported as bytes dropped, and `label FILE` refused to relabel it in place as cut short."""
    path = write_two_channels_on_one_topic(tmp_path / "foreign.mcap", index_types=IndexType.NONE)
    recording = open_recording(path)
    assert recording.complete and recording.discarded_bytes == 0
    assert dataset_cli.main(["inspect", str(path)]) == 0
    assert "dropped" not in capsys.readouterr().out
    assert dataset_cli.main(["label", str(path), "--task", "wave"]) == 0, capsys.readouterr().err
    [episode] = open_recording(path).episodes()
    assert episode.task == "wave"


def test_trim_of_an_empty_recording_says_there_is_nothing_to_copy(tmp_path, capsys):
    """Without --start and --end the message formatted None: `unsupported format string passed to
    NoneType.__format__`."""
    path = tmp_path / "empty.mcap"
    Recorder(path).close()
    assert dataset_cli.main(["trim", str(path), "-o", str(tmp_path / "out.mcap")]) == 1
    err = capsys.readouterr().err
    assert "NoneType" not in err and f"{path}: nothing to copy" in err
    assert not (tmp_path / "out.mcap").exists()


def _damaged_recording(path, compression):
    """100 references (values 1.0 + i) in one chunk, then one bit of the chunk's data flipped;
    uncompressed, it turns the value 42.0 of one sample into 52.0 (still valid JSON)."""
    clock = {"t": 0}
    # flush_interval_s: one chunk, however slow the machine (a wall-clock flush would cut it).
    with Recorder(path, clock_ns=lambda: clock["t"], threaded=False, compression=compression,
                  flush_interval_s=1e6) as rec:
        rec.start_episode("wave")
        for i in range(100):
            clock["t"] = i * 10_000_000
            rec.log_references(RobotReferences.from_flat(i * 0.01, np.full(FLAT_SIZE, 1.0 + i)))
    [chunk] = open_recording(path).index.blocks
    data = bytearray(path.read_bytes())
    start, end = chunk.offset + 9, chunk.offset + 9 + chunk.body_length
    position = data.index(b"42.0", start, end) if compression == "none" else (start + end) // 2
    data[position] ^= 0x01  # "4" -> "5"
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_a_chunk_damaged_after_close_gives_a_clear_error(tmp_path, compression, capsys):
    """A complete file whose summary is intact but one chunk is not (bit rot, a bad copy): the
    chunk's CRC was not checked, so damaged data was read as messages: uncompressed, a wrong
    value without any error; compressed, garbage reported as an undecodable message at a
    made-up log time (or zstd's own error, a traceback in the CLI). Now the CRC is checked, as
    the scan does, and the error names the file and the damaged chunk."""
    path = _damaged_recording(tmp_path / "session.mcap", compression)
    recording = open_recording(path)  # the summary is intact: opens as complete
    assert recording.complete
    with pytest.raises(RecordingFormatError, match="damaged chunk record"):
        recording.reference_trajectory()
    assert dataset_cli.main(["export", str(path), "-o", str(tmp_path / "train")]) == 1
    err = capsys.readouterr().err
    assert str(path) in err and "damaged chunk record" in err


def test_another_tools_episodes_topic_is_not_taken_for_ours(tmp_path, capsys):
    """An /episodes topic with another schema ended list/inspect/export in an AttributeError."""
    path = tmp_path / "foreign_episodes.mcap"
    with open(path, "wb") as f:
        writer = Writer(f)
        writer.start("", "another tool")
        schema = writer.register_schema("other.Episode", "jsonschema", b"{}")
        channel = writer.register_channel("/episodes", "json", schema)
        writer.add_message(channel, 0, json.dumps({"name": "walk", "begin": 0}).encode(), 0, 0)
        writer.finish()
    assert open_recording(path).episodes() == []
    assert dataset_cli.main(["inspect", str(path)]) == 0
    assert "Traceback" not in capsys.readouterr().err
