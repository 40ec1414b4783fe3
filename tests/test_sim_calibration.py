"""Simulation calibration (teleop.sim.calibration): the recording format, and a fit that
recovers hidden parameters from a recording made with them."""

import json

import numpy as np
import pytest

from teleop.sim.actuator import description_actuator_params, load_actuator_params
from teleop.sim.calibration import CalibrationParameters, calibrate, group_links, make_test_recording
from teleop.sim.recording_io import Recording, RecordingError, load_recording, save_recording


def _recording(T=5, k=2):
    t = np.arange(T) * 0.01
    return Recording(t, ["r_elbow", "r_wrist_pitch"][:k], np.zeros((T, k)), np.ones((T, k)), np.zeros((T, k)),
                     meta={"fixed_base": True})


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_recording_round_trip(tmp_path, suffix):
    rec = _recording()
    save_recording(rec, tmp_path / f"r{suffix}")
    back = load_recording(tmp_path / f"r{suffix}")
    assert back.joint_names == rec.joint_names and back.meta == rec.meta
    for key in ("time", "commanded", "measured", "commanded_velocity"):
        assert np.array_equal(getattr(back, key), getattr(rec, key))


@pytest.mark.parametrize("content, fragment", [
    ({"time": [0, 0.01, 0.02], "joint_names": ["a"], "commanded": [[0], [0], [0]]},
     "missing measured (a recording needs"),
    ({"time": [0, 0.01, 0.02], "joint_names": ["a"], "commanded": [[0], [0]], "measured": [[0], [0], [0]]},
     "'commanded' has shape (2, 1)"),
    ({"time": [0, 0.01, 0.05], "joint_names": ["a"], "commanded": [[0], [0], [0]], "measured": [[0], [0], [0]]},
     "evenly spaced"),
    ([1, 2, 3], "expected a JSON object"),
])
def test_malformed_recording_names_the_file(tmp_path, content, fragment):
    path = tmp_path / "bad_recording.json"
    path.write_text(json.dumps(content))
    with pytest.raises(RecordingError) as err:
        load_recording(path)
    assert "bad_recording.json" in str(err.value) and fragment in str(err.value)


def _damaged_npz(path, damage):
    """A recording .npz whose zip structure is damaged in place (fuzzer findings)."""
    save_recording(_recording(), path)
    data = bytearray(path.read_bytes())
    central = data.find(b"PK\x01\x02")
    if damage == "method":          # compression method 99: zipfile raises NotImplementedError
        data[central + 10:central + 12] = (99).to_bytes(2, "little")
        data[8:10] = (99).to_bytes(2, "little")
    elif damage == "encrypted":     # the 'encrypted' flag: zipfile raises RuntimeError
        data[central + 8] |= 1
        data[6] |= 1
    elif damage == "deflate":       # garbage compressed bytes: zlib.error or a CRC BadZipFile
        start = 30 + int.from_bytes(data[26:28], "little") + int.from_bytes(data[28:30], "little")
        data[start:start + 16] = b"\xff" * 16
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["method", "encrypted", "deflate"])
def test_damaged_npz_recording_is_a_recording_error(tmp_path, damage):
    path = tmp_path / "damaged.npz"
    _damaged_npz(path, damage)
    with pytest.raises(RecordingError) as err:
        load_recording(path)
    assert "damaged.npz" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("text", [
    '{"time": [0, 0.01, 1' + "0" * 400 + '], "joint_names": ["a"], "commanded": [[0], [0], [0]], '
    '"measured": [[0], [0], [0]]}',
    '{"time": [0, 0.01, 0.02], "joint_names": ["a"], "commanded": [[0], [0], [1' + "0" * 400 + ']], '
    '"measured": [[0], [0], [0]]}',
    '{"time": ' + "[" * 100000 + "]" * 100000 + "}",
    '{"time": [' + "7" * 5000 + "]}",
], ids=["huge-int-time", "huge-int-commanded", "deep", "5000-digit-int"])
def test_hostile_json_recording_is_a_recording_error(tmp_path, text):
    path = tmp_path / "hostile.json"
    path.write_text(text)
    with pytest.raises(RecordingError) as err:
        load_recording(path)
    assert "hostile.json" in str(err.value) and "\n" not in str(err.value)


def test_unknown_format_and_missing_file(tmp_path):
    (tmp_path / "r.csv").write_text("t,q\n")
    with pytest.raises(RecordingError, match=r"r\.csv.*unknown recording format"):
        load_recording(tmp_path / "r.csv")
    with pytest.raises(RecordingError, match="nope.npz"):
        load_recording(tmp_path / "nope.npz")


def test_group_links_are_the_links_the_group_moves(robot):
    links = group_links(robot, "right_arm")
    assert {"r_upper_arm", "r_forearm", "r_hand"} <= set(links)
    assert not any(name.startswith("l_") or name.startswith("torso") for name in links)


def test_fit_recovers_hidden_parameters_and_cuts_the_rmse(robot):
    """Small version of the CLI's demonstration (seconds, not minutes): the right arm,
    0.8 s, latency, mass and damping hidden at up to +-20%."""
    nominal = description_actuator_params(robot)
    fit = ("mass_scale", "kd")
    rec = make_test_recording(robot, nominal, ["right_arm"], perturb=0.2, seed=3, duration=0.8, perturbed=fit)
    truth = rec.meta["truth"]
    assert abs(truth["scales"]["right_arm"]["mass_scale"] - 1.0) > 0.05  # something to find
    result = calibrate(robot, rec, nominal, max_evaluations=60, progress=False, fit=fit)
    assert result.rmse_before / result.rmse_after >= 5.0
    assert max(result.recovery_error.values()) < 0.05, result.recovery_error
    assert result.noise_estimate == pytest.approx(rec.meta["noise_std"], rel=0.3)


def test_cli_makes_a_recording_and_writes_fitted_parameters(tmp_path, robot, capsys):
    from teleop.cli import main

    rec_path = tmp_path / "rec.json"
    assert main(["calibrate-sim", "--make-test-recording", str(rec_path), "--groups", "r_elbow",
                 "--duration", "0.4", "--seed", "2"]) == 0
    assert load_recording(rec_path).joint_names == ["r_elbow"]
    out = tmp_path / "cal"
    # 20 replays: enough to move off the nominal (with 9 the fit ended on it, and a file of
    # the nominal parameters was indistinguishable from the fitted ones).
    assert main(["calibrate-sim", "--data", str(rec_path), "--max-evaluations", "20", "--out", str(out),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["rmse_after_rad"] < 0.9 * report["rmse_before_rad"]     # measured: 0.66x
    fitted = load_actuator_params(out / "fitted_actuator.toml", robot.joint_names, robot.limits.effort)
    point = CalibrationParameters(report["fitted"]["latency"], report["fitted"]["scales"])
    assert fitted.latency == pytest.approx(point.latency)
    # The file holds the fitted point: the nominal's gains and friction of the elbow times
    # the reported scales, and the links the elbow moves scaled by its mass and CoM scales.
    from teleop.sim.actuator import link_scale_for

    nominal = description_actuator_params(robot)
    scales = report["fitted"]["scales"]["r_elbow"]
    assert scales != {k: 1.0 for k in scales}                          # the fit moved
    assert fitted.latency != pytest.approx(nominal.latency)
    elbow = robot.joint_index("r_elbow")
    for key in ("kp", "kd", "viscous", "coulomb"):
        assert getattr(fitted, key)[elbow] == pytest.approx(getattr(nominal, key)[elbow] * scales[key]), key
    others = np.arange(robot.n_joints) != elbow
    np.testing.assert_array_equal(fitted.kd[others], nominal.kd[others])
    for link in group_links(robot, "r_elbow"):
        mass, com = link_scale_for(nominal.link_scales, link)
        assert link_scale_for(fitted.link_scales, link) == pytest.approx((mass * scales["mass_scale"],
                                                                          com * scales["com_scale"])), link
    # A bad recording is a clear error naming the file, not a traceback.
    (tmp_path / "bad.json").write_text("{}")
    assert main(["calibrate-sim", "--data", str(tmp_path / "bad.json"), "--out", str(out)]) == 1
    assert "bad.json" in capsys.readouterr().err
