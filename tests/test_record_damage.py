"""Damaged recordings and interrupted rewrites.

* A rewrite (trim, label, recover) that fails, is interrupted or fills the disk leaves its
  output as it was: no half-written file, no leftover temporary, and the retry works.
* A chunk damaged inside a file (complete or cut short) costs only its own messages: the
  readers skip it with one warning, inspect and recover report it, recover writes the rest.
* A flipped bit in a complete file's message index or summary does not report nonsense:
  the index falls back to scanning the chunks.
* A rewrite shows a progress bar over the source's chunks.
"""

import errno
import re
import struct

import numpy as np
import pytest
from mcap.reader import make_reader

from retarget.references import FLAT_SIZE, RobotReferences
from teleop.record import Recorder, RecordingFormatError, open_recording, recover, write_copy
from teleop.record import dataset_cli, rewrite

STEP_NS = 10_000_000  # 100 Hz


def _session(path, n=300, chunk_size_bytes=2000):
    """n references at 100 Hz (value i at tick i) in one episode "reach", in many small chunks."""
    clock = {"t": 0}
    with Recorder(path, clock_ns=lambda: clock["t"], threaded=False, chunk_size_bytes=chunk_size_bytes) as rec:
        rec.start_episode("reach")
        for i in range(n):
            clock["t"] = i * STEP_NS
            rec.log_references(RobotReferences.from_flat(i * 0.01, np.full(FLAT_SIZE, float(i))))
        rec.stop_episode()
    return path


def _flip(path, offset, mask=0x10):
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def _damage_chunk(path, which):
    """Flip a bit in the compressed data of chunk number ``which``; (that chunk's block, the
    reference values it held)."""
    recording = open_recording(path)
    block = recording.index.blocks[which]
    values = [refs.to_flat()[0] for t, refs in recording.decoded("references")
              if block.start_ns <= t <= block.end_ns]
    _flip(path, block.offset + 9 + block.body_length // 2)
    return block, values


def _said(err):
    """The lines of stderr other than progress bars (drawn, then wiped, with carriage returns)."""
    return [line for line in re.split(r"[\r\n]", err) if line.strip() and "%|" not in line]


def _leftovers(folder, keep):
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


class _FailingWriter(rewrite.Writer):
    """An MCAP writer that fails (``error``) at its ``after``-th message: Ctrl-C or a full disk."""

    after = 50
    error: BaseException = KeyboardInterrupt()

    def add_message(self, *args, **kwargs):
        type(self).after -= 1
        if type(self).after < 0:
            raise type(self).error
        return super().add_message(*args, **kwargs)


def _failing(monkeypatch, error, after=50):
    monkeypatch.setattr(_FailingWriter, "after", after)
    monkeypatch.setattr(_FailingWriter, "error", error)
    monkeypatch.setattr(rewrite, "Writer", _FailingWriter)


# ------------------------------------------------------------------ 1. no half-written output


def test_a_recover_that_fails_leaves_no_output(tmp_path, capsys):
    """Before: a failed recover left a partial OUT without footer, and the retry was refused
    because OUT existed."""
    from mcap.writer import Writer
    path = tmp_path / "chan.mcap"
    with open(path, "wb") as f:   # messages on a channel id no Channel record defines: cannot be copied
        writer = Writer(f)
        writer.start()
        writer.add_message(8, 1, b"{}", 1)
        writer.finish()
    out = tmp_path / "rec.mcap"
    assert dataset_cli.main(["recover", str(path), "-o", str(out)]) == 1
    [said] = _said(capsys.readouterr().err)
    assert said.startswith(f"teleop dataset recover: error: {path}: ") and "channel id 8" in said
    assert _leftovers(tmp_path, {"chan.mcap"}) == []


def test_an_interrupted_trim_leaves_no_output_and_the_retry_works(tmp_path, monkeypatch):
    """Before: Ctrl-C left a half-written OUT, and the retry was refused: "-o OUT exists"."""
    source = _session(tmp_path / "s.mcap")
    out = tmp_path / "t.mcap"
    _failing(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        dataset_cli.main(["trim", str(source), "--start", "0", "--end", "2", "-o", str(out)])
    assert _leftovers(tmp_path, {"s.mcap"}) == []
    monkeypatch.undo()
    assert dataset_cli.main(["trim", str(source), "--start", "0", "--end", "2", "-o", str(out)]) == 0
    assert open_recording(out).complete and open_recording(out).channel("references").count == 201


def test_a_full_disk_during_label_o_is_one_error_line_and_no_output(tmp_path, monkeypatch, capsys):
    source = _session(tmp_path / "s.mcap")
    out = tmp_path / "labelled.mcap"
    _failing(monkeypatch, OSError(errno.ENOSPC, "No space left on device"))
    assert dataset_cli.main(["label", str(source), "--episode", "0", "--task", "wave", "-o", str(out)]) == 1
    [said] = _said(capsys.readouterr().err)
    assert said.startswith("teleop dataset label: error: ") and "No space left" in said
    assert _leftovers(tmp_path, {"s.mcap"}) == []


def test_a_forced_overwrite_that_fails_keeps_the_old_output(tmp_path, monkeypatch):
    source = _session(tmp_path / "s.mcap")
    out = tmp_path / "t.mcap"
    out.write_bytes(b"the user's previous file")
    _failing(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        dataset_cli.main(["trim", str(source), "--start", "0", "--end", "1", "-o", str(out), "--force"])
    assert out.read_bytes() == b"the user's previous file"
    assert _leftovers(tmp_path, {"s.mcap", "t.mcap"}) == []


def test_an_interrupted_label_in_place_keeps_the_recording(tmp_path, monkeypatch):
    source = _session(tmp_path / "s.mcap")
    before = source.read_bytes()
    _failing(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        dataset_cli.main(["label", str(source), "--episode", "0", "--task", "wave"])
    assert source.read_bytes() == before
    assert _leftovers(tmp_path, {"s.mcap"}) == []


def test_label_in_place_spares_a_users_file_named_like_a_temporary(tmp_path):
    """Before: the in-place edit wrote FILE.tmp, overwriting (then renaming away) a user's file."""
    source = _session(tmp_path / "s.mcap")
    mine = tmp_path / "s.mcap.tmp"
    mine.write_bytes(b"notes")
    source.chmod(0o640)
    assert dataset_cli.main(["label", str(source), "--episode", "0", "--task", "wave"]) == 0
    assert mine.read_bytes() == b"notes"
    assert open_recording(source).episodes()[0].task == "wave"
    assert source.stat().st_mode & 0o777 == 0o640     # replaced, with its permissions
    assert _leftovers(tmp_path, {"s.mcap", "s.mcap.tmp"}) == []


# ------------------------------------------------------------- 2. damaged chunks are skipped


def test_a_complete_file_with_a_damaged_chunk_is_read_without_it(tmp_path, capsys):
    """Before: every reader failed with "damaged chunk record at byte N", inspect said nothing."""
    path = _session(tmp_path / "s.mcap")
    block, lost = _damage_chunk(path, 5)
    recording = open_recording(path)
    assert recording.complete
    values = recording.reference_trajectory().values[:, 0]
    assert len(lost) > 0 and sorted(values) == [v for v in range(300) if v not in lost]
    assert len(recording.reference_trajectory().values) == len(values)    # read twice, warned once
    err = capsys.readouterr().err
    assert err.count("warning:") == 1
    assert f"{path}: 1 damaged chunk skipped" in err and f"at byte {block.offset}" in err
    assert f"{len(lost)} messages lost" in err
    assert recording.index.damaged_chunks == 1


def test_export_of_a_file_with_a_damaged_chunk_warns_and_exports(tmp_path, capsys):
    path = _session(tmp_path / "s.mcap")
    _damage_chunk(path, 5)
    assert dataset_cli.main(["export", str(path), "-o", str(tmp_path / "train")]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "1 damaged chunk skipped" in err
    assert len(list((tmp_path / "train" / "reach").glob("*.npz"))) == 1


def test_inspect_and_recover_report_a_damaged_chunk_and_recover_keeps_the_rest(tmp_path, capsys):
    path = _session(tmp_path / "s.mcap")
    block, lost = _damage_chunk(path, 5)
    assert dataset_cli.main(["inspect", str(path)]) == 0
    captured = capsys.readouterr()
    assert "state:     complete" in captured.out
    assert f"damaged:   1 damaged chunk skipped (CRC check or decompression failed; at byte {block.offset})" \
        in captured.out
    assert "warning:" not in captured.err          # reported once, in its place
    # The counts are what can be read, as recover copies (they were the summary's, lost included).
    assert f"messages: {302 - len(lost)} readable of 302" in captured.out
    assert re.search(rf"^/references +\S+ +{300 - len(lost)} ", captured.out, re.M), captured.out
    out = tmp_path / "rec.mcap"
    assert dataset_cli.main(["recover", str(path), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "1 damaged chunk skipped" in captured.out and f"{302 - len(lost)} messages" in captured.out
    assert "warning:" not in captured.err
    repaired = open_recording(out)
    assert repaired.complete and repaired.index.verify_chunks() == []
    assert sorted(repaired.reference_trajectory().values[:, 0]) == [v for v in range(300) if v not in lost]
    assert [(ep.task, ep.stopped) for ep in repaired.episodes()] == [("reach", True)]


def test_a_cut_file_keeps_the_intact_chunks_after_a_damaged_one(tmp_path, capsys):
    """Before: the scan stopped at the damaged chunk, dropping every intact chunk after it."""
    path = _session(tmp_path / "s.mcap")
    blocks = open_recording(path).index.blocks
    _, lost = _damage_chunk(path, 3)
    last = blocks[-1]
    path.write_bytes(path.read_bytes()[:last.offset + 9 + last.body_length])   # crash: no summary
    recording = open_recording(path)
    assert not recording.complete and recording.problem is None
    assert recording.channel("references").count == 300 - len(lost)
    report = recover(path, tmp_path / "rec.mcap")
    assert report.damaged_chunks == 1 and "their messages lost" in report.summary()
    with open(tmp_path / "rec.mcap", "rb") as f:
        assert sum(1 for _ in make_reader(f).iter_messages(topics=["/references"])) == 300 - len(lost)
    assert "warning:" not in capsys.readouterr().err


def test_a_damaged_last_chunk_of_a_cut_file_is_its_lost_tail(tmp_path):
    path = _session(tmp_path / "s.mcap")
    _, lost = _damage_chunk(path, -1)
    last = open_recording(path).index.blocks[-1]
    path.write_bytes(path.read_bytes()[:last.offset + 9 + last.body_length])
    recording = open_recording(path)
    assert "damaged chunk record" in recording.problem and recording.index.damaged_chunks == 0
    assert recording.channel("references").count == 300 - len(lost)
    assert recording.discarded_bytes == 9 + last.body_length


def test_a_cut_file_whose_channels_were_defined_in_damaged_chunks(tmp_path, capsys):
    """The recorder defines a channel in the chunk of its first message (/episodes in the
    first, /references in the second): with those chunks damaged the later messages cannot be
    named. Said, not "channel id N, which no Channel record defines"."""
    path = _session(tmp_path / "s.mcap")
    _damage_chunk(path, 0)
    _damage_chunk(path, 1)
    last = open_recording(path).index.blocks[-1]
    path.write_bytes(path.read_bytes()[:last.offset + 9 + last.body_length])
    recording = open_recording(path)
    assert recording.index.damaged_chunks == 2 and recording.message_count == 0
    assert recording.index.orphaned_messages > 250
    assert dataset_cli.main(["recover", str(path), "-o", str(tmp_path / "rec.mcap")]) == 1
    [said] = _said(capsys.readouterr().err)
    assert said.startswith(f"teleop dataset recover: error: {path}: nothing readable to recover (2 damaged chunks "
                           "skipped") and "messages of channels defined only in them" in said
    assert not (tmp_path / "rec.mcap").exists()


def test_a_file_whose_every_chunk_is_damaged_is_an_error(tmp_path, capsys):
    path = _session(tmp_path / "s.mcap", n=20, chunk_size_bytes=1 << 20)
    _damage_chunk(path, 0)
    with pytest.raises(RecordingFormatError, match="damaged chunk record at byte .*no intact chunk left"):
        open_recording(path).reference_trajectory()
    assert dataset_cli.main(["recover", str(path), "-o", str(tmp_path / "rec.mcap")]) == 1
    assert "nothing readable to recover (1 damaged chunk skipped" in capsys.readouterr().err
    assert not (tmp_path / "rec.mcap").exists()


@pytest.mark.parametrize("content, expected", [
    (b"time,x\n0,1\n", "not an MCAP recording"),
    (b"\x89MCAP0\r\n\x05" + bytes(40), "expected a header"),
])
def test_files_that_are_not_mcap_or_have_a_damaged_header_keep_their_error(tmp_path, capsys, content, expected):
    path = tmp_path / "x.mcap"
    path.write_bytes(content)
    assert dataset_cli.main(["recover", str(path), "-o", str(tmp_path / "rec.mcap")]) == 1
    [said] = _said(capsys.readouterr().err)
    assert said.startswith(f"teleop dataset recover: error: {path}: ") and expected in said
    assert not (tmp_path / "rec.mcap").exists()


# -------------------------------------------------- 3. a damaged summary or message index


def test_a_flipped_bit_in_a_message_index_time_does_not_make_up_a_duration(tmp_path):
    """Before: inspect showed a duration of hours (the bad time became the first message's)."""
    path = _session(tmp_path / "s.mcap")
    good = open_recording(path)
    block = good.index.blocks[2]
    first_entry_time = block.offset + 9 + block.body_length + 9 + 6   # message index: prefix, channel, length
    _flip(path, first_entry_time + 5)                                   # 2**44 ns: ~4.9 hours
    recording = open_recording(path)
    assert recording.complete
    assert recording.duration_s == pytest.approx(good.duration_s)
    assert recording.channel("references").count == 300


def test_a_flipped_bit_in_the_summary_is_caught_by_its_crc(tmp_path):
    """Before: a damaged channel record in the summary renamed the topic ("/rdferences")."""
    path = _session(tmp_path / "s.mcap")
    data = path.read_bytes()
    summary_start = struct.unpack_from("<Q", data, len(data) - 8 - 20)[0]
    topic = data.index(struct.pack("<I", len("/references")) + b"/references", summary_start) + 4  # the Channel's
    _flip(path, topic + 2, 0x01)
    recording = open_recording(path)
    assert recording.complete and recording.channel("references").count == 300


# ------------------------------------------------------------------------ 4. progress bar


def test_a_rewrite_shows_a_progress_bar_over_the_chunks(tmp_path, capsys):
    source = _session(tmp_path / "s.mcap")
    chunks = len(open_recording(source).index.blocks)
    assert dataset_cli.main(["trim", str(source), "--start", "0", "--end", "2.995", "-o",
                             str(tmp_path / "t.mcap")]) == 0
    err = capsys.readouterr().err
    assert "writing t.mcap" in err and f"/{chunks}" in err
    write_copy(open_recording(source), tmp_path / "quiet.mcap", progress=False)
    assert capsys.readouterr().err == ""


def test_a_bug_on_the_summary_path_is_raised_not_hidden_by_a_scan(tmp_path, monkeypatch):
    """A damaged summary falls back to a full scan; a bug in the code reading it (a name an
    mcap release renamed) did too, and every read became a slow scan with the bug unseen."""
    from teleop.record import mcap_index

    path = _session(tmp_path / "s.mcap")
    assert mcap_index.build_index(path).problem is None

    def renamed_api(*args, **kwargs):
        raise AttributeError("module 'mcap.records' has no attribute 'Footer'")

    monkeypatch.setattr(mcap_index, "_index_from_summary", renamed_api)
    with pytest.raises(AttributeError, match="Footer"):
        mcap_index.build_index(path)
