"""``teleop calibrate-sim`` as a user reads it: how to use the fitted file, and its errors."""

from __future__ import annotations

from teleop.cli import main


def test_text_report_says_how_to_use_the_fitted_file(tmp_path, capsys):
    recording = tmp_path / "rec.json"
    assert main(["calibrate-sim", "--make-test-recording", str(recording), "--groups", "r_elbow",
                 "--duration", "0.4", "--seed", "2"]) == 0
    out = tmp_path / "cal"
    assert main(["calibrate-sim", "--data", str(recording), "--max-evaluations", "16", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    fitted = out / "fitted_actuator.toml"
    assert fitted.is_file()
    assert f"TELEOP_SIM_ACTUATOR={fitted} teleop COMMAND" in text     # as the README documents it
    assert "[sim.actuator] file =" in text and "Simulation(actuator=" in text


def test_errors_have_the_command_prefix(tmp_path, capsys):
    assert main(["calibrate-sim"]) == 2
    assert capsys.readouterr().err.startswith("teleop calibrate-sim: error: give exactly one of --data")
    (tmp_path / "bad.json").write_text("{}")
    # A file it cannot use: exit code 1, as for every command (2 is for option values).
    assert main(["calibrate-sim", "--data", str(tmp_path / "bad.json"), "--out", str(tmp_path / "cal")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("teleop calibrate-sim: error: ") and "bad.json" in err
