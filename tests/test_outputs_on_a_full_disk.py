"""Outputs that replace a file are written beside it and renamed over it: on a full disk
the file they would replace stays whole, no partial file is left, and the error names the
output. A bad-input sweep found three written in place (the file replaced truncated, or a
0-byte one left) with an error naming no file: a calibrate-sim test recording, a dataset
plot and a camera calibration."""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
import pytest

from conftest import error_line, run_cli

FULL = OSError(errno.ENOSPC, "No space left on device")


def _fails_half_way(target, *args, **kwargs):
    """A write of ``target`` (a path or an open file) that puts a few bytes there, then finds
    the disk full."""
    if hasattr(target, "write"):
        target.write(b"partial")
    else:
        with open(target, "wb") as f:
            f.write(b"partial")
    raise FULL


def _only_these(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_test_recording_replaced_on_a_full_disk_stays_whole(tmp_path, capsys, monkeypatch):
    out = tmp_path / "cs.npz"
    assert run_cli(capsys, "calibrate-sim", "--make-test-recording", out, "--duration", "0.5")[0] == 0
    before = out.read_bytes()
    monkeypatch.setattr(np, "savez_compressed", _fails_half_way)
    rc, _, err = run_cli(capsys, "calibrate-sim", "--make-test-recording", out, "--duration", "1", "--force")
    assert rc == 1 and error_line(err) == f"{out}: No space left on device"
    assert out.read_bytes() == before and _only_these(tmp_path) == ["cs.npz"]


def test_a_plot_replaced_on_a_full_disk_stays_whole(tmp_path, capsys, monkeypatch):
    import matplotlib.figure

    recording = tmp_path / "pattern.mcap"
    assert run_cli(capsys, "record", "-o", recording, "--duration", "0.3")[0] == 0
    png = tmp_path / "plot.png"
    assert run_cli(capsys, "dataset", "plot", recording, "-o", png)[0] == 0
    before = png.read_bytes()
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, target, **kw: _fails_half_way(target))
    rc, _, err = run_cli(capsys, "dataset", "plot", recording, "-o", png, "--force")
    assert rc == 1 and error_line(err) == f"{png}: No space left on device"
    assert png.read_bytes() == before and _only_these(tmp_path) == ["pattern.mcap", "plot.png"]


def test_a_camera_calibration_replaced_on_a_full_disk_stays_whole(tmp_path, monkeypatch):
    from teleop.jog.camera_intrinsics import CameraCalibration

    calibration = CameraCalibration(np.array([[457.0, 0, 320], [0, 457.0, 240], [0, 0, 1]]), np.zeros(5),
                                    (640, 480), 0.2, "test")
    path = tmp_path / "camera.json"
    calibration.save(path)
    before = path.read_bytes()
    monkeypatch.setattr(Path, "write_text", lambda self, *a, **kw: _fails_half_way(self))
    with pytest.raises(OSError) as failed:
        calibration.save(path)
    assert failed.value.filename == str(path)
    assert path.read_bytes() == before and _only_these(tmp_path) == ["camera.json"]
