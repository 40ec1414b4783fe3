"""`teleop info FILE`: what a task library, a references take or a motion file holds."""

import json

from conftest import SYNTHETIC, error_line
from teleop.cli import main

TAKE = SYNTHETIC / "squat" / "squat_0.npz"


def test_info_describes_a_trained_library(tmp_path, capsys):
    library = tmp_path / "library.npz"
    assert main(["train", str(SYNTHETIC), "-o", str(library), "--tasks", "squat,side_reach"]) == 0
    capsys.readouterr()
    assert main(["info", str(library), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == "task library" and info["signals"] == 20
    assert sorted(info["tasks"]) == ["side_reach", "squat"]
    squat = info["tasks"]["squat"]
    assert squat["takes"] == len(list((SYNTHETIC / "squat").glob("*.npz")))
    assert squat["min_duration_s"] <= squat["mean_duration_s"] <= squat["max_duration_s"]
    assert info["metadata"]["robot"] == "iCub home posture"
    assert info["metadata"]["robot_dimensions"].startswith("arm 0.")
    assert main(["info", str(library)]) == 0
    out = capsys.readouterr().out
    assert "task library of 2 tasks" in out and "learned for iCub home posture (arm 0." in out


def test_info_describes_references_and_motion(tmp_path, capsys):
    assert main(["retarget", str(TAKE), "--out", str(tmp_path / "refs")]) == 0
    references = tmp_path / "refs" / "references.npz"
    capsys.readouterr()
    assert main(["info", str(references), "--json"]) == 0
    refs = json.loads(capsys.readouterr().out)
    assert main(["info", str(TAKE), "--json"]) == 0
    motion = json.loads(capsys.readouterr().out)
    assert motion["kind"] == "human motion" and "right_hand" in motion["segments"]
    assert refs["kind"] == "references"
    assert refs["samples"] == motion["frames"] and abs(refs["duration_s"] - motion["duration_s"]) < 1e-9


def test_info_on_a_recording_or_a_foreign_file_says_what_to_use(tmp_path, capsys):
    recording = tmp_path / "session.mcap"
    recording.write_bytes(b"\x89MCAP0\r\n")
    assert main(["info", str(recording)]) == 1
    assert error_line(capsys.readouterr().err) == (f"{recording}: not a readable recording (truncated MCAP file "
                                                   "(header record missing, 8 bytes))")
    image = tmp_path / "renamed.mcap"      # judged by its name alone, it was "a recording"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(32))
    assert main(["info", str(image)]) == 1
    assert capsys.readouterr().err == (f"teleop info: error: {image}: not an MCAP recording (it does not begin "
                                       "with MCAP's magic bytes)\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    assert main(["info", str(notes)]) == 1
    assert "unsupported motion format" in error_line(capsys.readouterr().err)
    assert main(["info", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"teleop info: error: {tmp_path}: a folder, not a file\n"   # no debug hint
    assert main(["info", str(tmp_path / "missing.npz")]) == 1
    assert capsys.readouterr().err == f"teleop info: error: {tmp_path / 'missing.npz'}: no such file\n"


def test_info_describes_an_operator_recordings_input_as_the_motion_it_is(tmp_path, capsys):
    """README: an operator recording's input is a motion file (retarget and stream-mvn read
    it); info refused it and sent the user to `dataset inspect`."""
    from test_input_hints import operator_recording

    recording = operator_recording(tmp_path / "operator.mcap", frames=60)
    assert main(["info", str(recording)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{recording}: human motion (the operator input of a recording), 60 frames")
    assert out[1] == f"the rest of the recording (channels, episodes): teleop dataset inspect {recording}"


def test_info_says_an_operator_recording_cut_short_is_cut_short(tmp_path, capsys):
    """A truncated operator recording was called "a recording without an operator's input"."""
    from test_input_hints import operator_recording

    whole = operator_recording(tmp_path / "operator.mcap", frames=60).read_bytes()
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(whole[:len(whole) // 3])
    assert main(["info", str(cut)]) == 1
    line = error_line(capsys.readouterr().err)
    assert "cut short" in line and "without" not in line, line


def test_info_on_an_xsens_joint_angle_file_names_the_pose_file_and_the_assumed_rate(capsys):
    """`info 1.csv` described p1.csv's frames as its own, at a rate it printed as if stated."""
    from conftest import shared_data

    angles = shared_data("xsens_putaside_box", needs=("1.csv", "p1.csv")) / "1.csv"
    assert main(["info", str(angles)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"  the segment poses read from {angles.parent / 'p1.csv'}"
    assert out[2] == ("  the file does not state its rate: read at 100 Hz (the commands that play or learn it take "
                      "--rate-hz)")
