"""Review of the command lines, session 38: three user-facing defects.

1. ``teleop operator --input openvr --view web`` without SteamVR printed "web viewer on
   http://127.0.0.1:8080/" (the server started), and only then the error about SteamVR: an
   input that cannot be opened (no SteamVR, the MVN port in use, a missing or malformed
   file) is now opened before the web viewer starts, and its error is all the user sees.
2. ``--rate-hz`` with a motion file that states its own rate (BVH, MVNX, VR, .npz) was
   refused by ``teleop retarget`` and ``teleop stream-mvn`` only after the whole file had
   been read (seconds for a long take): one shared check (:func:`teleop.takes.check_rate_hz`)
   now tells the format from the file's name and first bytes, before any reading, in the
   four commands.
3. ``teleop jog --make-test-video OUT`` refused the options only a jog session uses when
   given another value than their default, but one given with its default value (``--mode
   absolute``) was ignored in silence: an option given is now refused whatever its value.

Every test runs the real ``teleop`` entry point (in-process, or as a process for the exit
code); the real recorded data under ../shared/data is optional (skipped when absent).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO_ROOT, SYNTHETIC, error_line, free_port, run_cli, shared_data
from teleop.cli import main
from teleop.takes import RATE_HZ_APPLIES

#: A take of the synthetic operator: a human motion .npz, which states its rate (50 Hz).
TAKE = SYNTHETIC / "squat" / "squat_0.npz"


# ------------------------------------------------------------------ 1. operator: input before the web viewer
@pytest.fixture
def viewers_started(monkeypatch) -> list:
    """The web viewers started during the test (VideoWebViewer.start, spied on)."""
    from teleop.video.web import VideoWebViewer

    started: list = []
    start = VideoWebViewer.start

    def spied(self):
        started.append(self)
        return start(self)

    monkeypatch.setattr(VideoWebViewer, "start", spied)
    return started


@pytest.fixture
def no_steamvr(monkeypatch):
    """The openvr package as it is on a machine where SteamVR is not running: its init fails
    with InitError_Init_PathRegistryNotFound (whether or not openvr is installed here)."""
    from teleop.inputs import openvr_input

    class OpenVRError(Exception):
        pass

    class InitError_Init_PathRegistryNotFound(OpenVRError):    # noqa: N801 (openvr's name)
        pass

    def init(_application_type):
        raise InitError_Init_PathRegistryNotFound()

    fake = types.SimpleNamespace(init=init, VRApplication_Other=3, VRApplication_Overlay=2,
                                 error_code=types.SimpleNamespace(OpenVRError=OpenVRError))
    monkeypatch.setattr(openvr_input, "import_openvr", lambda: fake)


def _operator_failing_to_start(capsys, secret, *argv: str) -> tuple[str, str]:
    """``teleop operator --view web ARGV`` failing as it starts: (its error message, the rest
    of what it said on stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(["operator", "--view", "web", "--port", "0", "--robot", f"127.0.0.1:{free_port()}",
              "--video-listen", "127.0.0.1:0", "--secret-file", str(secret), "--duration", "0.1", *argv])
    return str(exc.value.code), capsys.readouterr().err


def test_operator_without_steamvr_says_only_that(capsys, secret, no_steamvr, viewers_started):
    message, err = _operator_failing_to_start(capsys, secret, "--input", "openvr")
    assert message.startswith("teleop operator: error: --input openvr: SteamVR is not running or no headset is "
                              "connected: VR_Init failed with InitError_Init_PathRegistryNotFound"), message
    assert "web viewer on" not in err and not viewers_started


def test_operator_with_the_mvn_port_in_use_says_only_that(capsys, secret, viewers_started):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        mvn = taken.getsockname()[1]
        message, err = _operator_failing_to_start(capsys, secret, "--input", f"xsens-live:{mvn}")
    assert message == (f"teleop operator: error: --input xsens-live:{mvn}: cannot listen for the MVN stream on "
                       f"127.0.0.1:{mvn}: Address already in use")
    assert "web viewer on" not in err and not viewers_started


@pytest.mark.parametrize("content, said", [(None, "no such file"),
                                           ("HIERARCHY\nROOT Hips\n{\n", "file ends inside the HIERARCHY")])
def test_operator_with_a_missing_or_malformed_file_says_only_that(capsys, secret, tmp_path, viewers_started,
                                                                   content, said):
    take = tmp_path / "take.bvh"
    if content is not None:
        take.write_text(content)
    message, err = _operator_failing_to_start(capsys, secret, "--input", str(take))
    assert message.startswith(f"teleop operator: error: --input {take}") and said in message, message
    assert "web viewer on" not in err and not viewers_started


def test_operator_failing_to_start_keeps_its_exit_code_and_says_one_line(tmp_path, secret):
    """As a process: exit code 1 (as before), and the error is the only line on stderr."""
    missing = tmp_path / "absent.npz"
    proc = subprocess.run([sys.executable, "-m", "teleop", "operator", "--input", str(missing), "--view", "web",
                           "--port", "0", "--robot", f"127.0.0.1:{free_port()}", "--video-listen", "127.0.0.1:0",
                           "--secret-file", str(secret), "--duration", "0.1"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"teleop operator: error: --input {missing}: no such file"], proc.stderr


def test_operator_with_the_web_port_in_use_leaves_no_recording(capsys, secret, tmp_path):
    """The viewer's port is bound before the recording is made: a port in use leaves no empty
    recording behind (which the next run would refuse without --force)."""
    record = tmp_path / "session.mcap"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        web = taken.getsockname()[1]
        rc = main(["operator", "--view", "web", "--port", str(web), "--record", str(record), "--robot",
                   f"127.0.0.1:{free_port()}", "--video-listen", "127.0.0.1:0", "--secret-file", str(secret),
                   "--duration", "0.1"])
    err = capsys.readouterr().err
    assert rc == 1 and error_line(err).startswith(f"--port {web}: ") and "web viewer on" not in err
    assert not record.exists()


def test_operator_that_starts_still_says_where_its_viewer_is(capsys, secret, viewers_started):
    rc = main(["operator", "--input", str(TAKE), "--view", "web", "--port", "0", "--robot",
               f"127.0.0.1:{free_port()}", "--video-listen", "127.0.0.1:0", "--secret-file", str(secret),
               "--duration", "0.2"])
    err = capsys.readouterr().err
    assert rc == 1       # nobody answered: no robot station in this test
    assert len(viewers_started) == 1
    assert re.fullmatch(r"web viewer on http://127\.0\.0\.1:\d+/", err.splitlines()[0]), err


# ------------------------------------------------------------------ 2. --rate-hz refused before reading
@pytest.fixture
def no_reading(monkeypatch):
    """Every way a command reads a motion file fails the test: the --rate-hz check must come
    before (it took seconds on a long take, all for a refusal)."""
    import teleop.takes
    from retarget.references import ReferenceTrajectory

    def read(*_, **__):
        raise AssertionError("the motion file was read before --rate-hz was checked")

    monkeypatch.setattr(teleop.takes, "read_motion", read)
    monkeypatch.setattr(teleop.takes, "recording_motion", read)
    monkeypatch.setattr(ReferenceTrajectory, "load_npz", staticmethod(read))


def _bvh(tmp_path: Path) -> Path:
    """A .bvh file: only its name and first bytes are looked at before the refusal."""
    path = tmp_path / "walk.bvh"
    path.write_text("HIERARCHY\nROOT Hips\n{\n")
    return path


@pytest.mark.parametrize("command", [
    lambda f, d: ["retarget", f, "--rate-hz", "50", "--out", d / "r"],
    lambda f, d: ["stream-mvn", f, "--rate-hz", "50", "--port", "9"],
    lambda f, d: ["operator", "--input", f, "--rate-hz", "50", "--duration", "0.1"],
    lambda f, d: ["train", f, "--rate-hz", "50", "-o", d / "lib.npz"],
], ids=["retarget", "stream-mvn", "operator", "train"])
def test_a_rate_for_a_file_that_states_its_own_is_refused_before_reading(capsys, tmp_path, no_reading, command):
    bvh = _bvh(tmp_path)
    rc, _, err = run_cli(capsys, *command(bvh, tmp_path))
    assert rc == 2 and error_line(err) == f"{RATE_HZ_APPLIES}; {bvh} is a BVH file, which states its own"
    assert "--help lists the options" in err


def test_train_refuses_a_rate_none_of_its_takes_uses_before_reading(capsys, tmp_path, no_reading):
    data = tmp_path / "squat"
    data.mkdir()
    for k in range(3):
        (data / f"squat_{k}.npz").write_bytes((SYNTHETIC / "squat" / f"squat_{k}.npz").read_bytes())
    rc, _, err = run_cli(capsys, "train", data, "--rate-hz", "50", "-o", tmp_path / "lib.npz")
    assert rc == 2 and error_line(err) == (f"{RATE_HZ_APPLIES}; none of the 3 takes is one: their files state "
                                           "their rate")


@pytest.mark.parametrize("command", [["trial", "--rtt", "1.5"], ["eval", "promp"]], ids=["trial", "eval"])
def test_eval_and_trial_refuse_a_rate_none_of_their_takes_uses(capsys, tmp_path, no_reading, command):
    """eval and trial read two sets (one folder as both, here): each take is counted once,
    and the rate is refused before either set is read (it was ignored without a word)."""
    data = tmp_path / "squat"
    data.mkdir()
    for k in range(3):
        (data / f"squat_{k}.npz").write_bytes((SYNTHETIC / "squat" / f"squat_{k}.npz").read_bytes())
    rc, _, err = run_cli(capsys, *command, "--train", tmp_path, "--test", tmp_path, "--leave-one-out",
                         "--rate-hz", "50", "--out", tmp_path / "out")
    assert rc == 2 and error_line(err) == (f"{RATE_HZ_APPLIES}; none of the 3 takes is one: their files state "
                                           "their rate")


def test_eval_takes_a_rate_when_one_set_uses_it(capsys, tmp_path):
    """HDM05's AMC takes use --rate-hz: a test set of them beside a training set that states
    its rate is not refused for it."""
    hdm05 = shared_data("hdm05")
    rc, out, err = run_cli(capsys, "eval", "promp", "--train", hdm05, "--test", hdm05, "--train-performers", "bk",
                           "--test-performers", "dg", "--test-tasks", "squat1Reps",
                           "--train-tasks", "squat1Reps,grabHighR", "--rate-hz", "120", "--json",
                           "--out", tmp_path / "out")
    assert rc == 0, err
    assert json.loads(out)["n_test"] >= 1


def test_a_real_bvh_take_is_refused_before_reading(capsys, tmp_path, no_reading):
    bvh = shared_data("cmu_bvh", "115_06.bvh")
    rc, _, err = run_cli(capsys, "retarget", bvh, "--rate-hz", "50", "--out", tmp_path / "r")
    assert rc == 2 and error_line(err) == f"{RATE_HZ_APPLIES}; {bvh} is a BVH file, which states its own"


def test_a_file_that_cannot_be_told_is_not_refused_for_its_rate(capsys, tmp_path):
    """A missing or unrecognised file says what is wrong with it (as before), not "--rate-hz
    applies to ...", which would send the user the wrong way."""
    missing = tmp_path / "absent.bvh"
    rc, _, err = run_cli(capsys, "retarget", missing, "--rate-hz", "50", "--out", tmp_path / "r")
    assert rc == 1 and error_line(err) == f"{missing}: no such file"


def _files_of_each_kind(folder: Path) -> dict[str, Path]:
    """One small file of each kind whose rate is told (or not) before reading."""
    from promp.library import FORMAT_NAME as LIBRARY

    files = {"walk.bvh": "HIERARCHY\n", "take.mvnx": "<?xml version='1.0'?>\n<mvnx>\n", "vr.json": "{}\n",
             "vr.txt": "t,head_px,head_py\n0,0,0\n", "take.amc": ":FULLY-SPECIFIED\n:DEGREES\n1\n",
             "p1.csv": ",".join(["0"] * 161) + "\n", "note.txt": "hello\n", "session.mcap": "x"}
    paths = {}
    for name, text in files.items():
        paths[name] = folder / name
        paths[name].write_text(text)
    paths["human.npz"] = TAKE
    np.savez(folder / "references.npz", values=np.zeros((2, 3)), times=np.arange(2.0))
    np.savez(folder / "library.npz", format=np.array(LIBRARY))
    paths["references.npz"], paths["library.npz"] = folder / "references.npz", folder / "library.npz"
    (folder / "damaged.npz").write_bytes(b"PK not an archive")
    paths["damaged.npz"], paths["absent.bvh"] = folder / "damaged.npz", folder / "absent.bvh"
    return paths


def test_what_states_its_rate_is_told_from_names_and_first_bytes(tmp_path):
    from teleop.takes import rate_stated_by

    files = _files_of_each_kind(tmp_path)
    assert {name: rate_stated_by(path) for name, path in files.items()} == {
        "walk.bvh": "a BVH file", "take.mvnx": "an Xsens MVNX file", "vr.json": "a VR tracker JSON file",
        "vr.txt": "a VR tracker CSV file", "human.npz": "a human motion .npz file",
        "references.npz": "a references .npz file", "session.mcap": "a recording",
        # They take a rate (AMC, Xsens CSV), or cannot be told: reading them says what they are.
        "take.amc": None, "p1.csv": None, "note.txt": None, "library.npz": None, "damaged.npz": None,
        "absent.bvh": None}


def test_a_long_take_is_refused_without_being_read(capsys, tmp_path, no_reading):
    """The point of it: a long BVH take (about 12 MB, 16000 frames; an 81 MB one took 6.5 s
    to read before its refusal) is refused from its name and first bytes. Checked by making
    every read fail the test, not by the clock (noisy on a shared machine)."""
    frames = 16000
    channels = " ".join(["0.0"] * 96)
    bvh = tmp_path / "long.bvh"
    with bvh.open("w") as f:
        f.write("HIERARCHY\nROOT Hips\n{\n  OFFSET 0 0 0\n  CHANNELS 6 Xposition Yposition Zposition Zrotation "
                "Xrotation Yrotation\n  End Site\n  {\n    OFFSET 0 1 0\n  }\n}\n")
        f.write(f"MOTION\nFrames: {frames}\nFrame Time: 0.008333\n")
        f.writelines(f"{channels}\n" for _ in range(frames))
    rc, _, err = run_cli(capsys, "stream-mvn", bvh, "--rate-hz", "50", "--port", "9")
    assert rc == 2 and error_line(err).startswith(RATE_HZ_APPLIES)


# ------------------------------------------------------------------ 3. jog --make-test-video: options at their default
#: Each option only a jog session uses, given with its default value (or, for those without
#: one, a value a user would give).
JOG_ONLY_AT_DEFAULT = [["--mode", "absolute"], ["--detector", "auto"], ["--damping", "1"], ["--hand", "right"],
                       ["--scale", "1"], ["--view", "none"], ["--port", "8080"], ["--clutch", "held"],
                       ["--axis-map=-z,x,-y"], ["--offset", "0,0,0"], ["--no-orientation"],
                       ["--no-collision-checks"], ["--realtime"], ["--loop"], ["--calibration", "cam.json"]]


@pytest.mark.parametrize("option", JOG_ONLY_AT_DEFAULT, ids=lambda o: o[0].split("=")[0])
def test_make_test_video_refuses_a_jog_option_given_with_its_default(capsys, tmp_path, option):
    out = tmp_path / "tag.mp4"
    rc, _, err = run_cli(capsys, "jog", "--make-test-video", out, *option, "--duration", "0.1")
    name = option[0].split("=")[0]
    assert rc == 2 and error_line(err).startswith(f"{name} has no effect with --make-test-video, which renders")
    assert not out.exists()


def test_make_test_video_names_every_jog_option_given(capsys, tmp_path):
    out = tmp_path / "tag.mp4"
    rc, _, err = run_cli(capsys, "jog", "--make-test-video", out, "--mode", "absolute", "--hand", "left",
                         "--port", "8080", "--duration", "0.1")
    assert rc == 2 and error_line(err).startswith("--mode, --hand, --port have no effect with --make-test-video")
    assert error_line(err).endswith("give them to teleop jog --camera OUT instead")


def test_jog_help_still_shows_the_defaults(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["jog", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for said in ("(default absolute)", "(default auto:", "(default 1: no slow-down)", "(default right)",
                 "(default 1)", "(default none)", "(default 8080;", "(default '-z,x,-y':"):
        assert said in text, said


def test_a_jog_session_still_gets_the_defaults(capsys, tmp_path):
    """The jog-only options are parsed as None ("not given"): a session gets their defaults."""
    video = tmp_path / "tag.avi"
    assert main(["jog", "--make-test-video", str(video), "--duration", "0.5", "--json"]) == 0
    capsys.readouterr()
    for argv, mode in (([], "absolute"), (["--mode", "relative", "--clutch", "held"], "relative")):
        rc, out, err = run_cli(capsys, "jog", "--camera", video, "--no-collision-checks", "--json", *argv)
        summary = json.loads(out.strip().splitlines()[-1])
        assert rc == 0, err
        assert summary["mode"] == mode and summary["frames"] == 15 and not summary["realtime"]
