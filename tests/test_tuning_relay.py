"""Peak detection (§3.3.3), the relay test's T_u and K_u (§3.5.2) and the simulated arm rig."""

import numpy as np
import pytest

from teleop.tuning.peaks import detect_peaks
from teleop.tuning.relay import RelayTestError, ultimate_from_peaks


def test_peaks_of_a_sine():
    t = np.arange(0, 2.0, 0.001)
    y = 3.0 * np.sin(2 * np.pi * 2.0 * t)       # 2 Hz: maxima at 0.125 + k/2, minima at 0.375 + k/2
    p = detect_peaks(y, decimation=2, min_separation=5)
    assert len(p.index) == 8
    assert np.all(p.sign[::2] == 1) and np.all(p.sign[1::2] == -1)
    assert t[p.index[p.sign == 1]] == pytest.approx([0.125, 0.625, 1.125, 1.625], abs=0.003)
    assert p.value[p.sign == 1] == pytest.approx(3.0, abs=1e-3)


def test_close_detections_are_dropped():
    # Noise-like double turn right after a peak: with min_separation the second one is dropped.
    y = np.array([0, 1, 2, 3, 2.9, 3.0, 2, 1, 0, -1, -2, -1, 0, 1.0])
    assert len(detect_peaks(y, decimation=1, min_separation=0).index) == 4
    kept = detect_peaks(y, decimation=1, min_separation=3)
    assert list(kept.index) == [3, 10]
    assert list(kept.sign) == [1, -1]


def test_ultimate_gain_and_period_from_a_relay_oscillation():
    # An oscillation of amplitude a = 0.1 rad, period 0.25 s, under a relay of d = 2 N m:
    # T_u = 0.25 s and K_u = 4d / (pi a) = 80 / pi.
    t = np.arange(0, 2.0, 0.001)
    y = 0.5 + 0.1 * np.sin(2 * np.pi * t / 0.25)
    r = ultimate_from_peaks(t, y, relay_torque=2.0)
    assert r.tu == pytest.approx(0.25, abs=0.002)
    assert r.ku == pytest.approx(80 / np.pi, rel=0.01)
    assert r.n_peaks >= 6


def test_too_few_peaks_is_an_error():
    t = np.arange(0, 0.3, 0.001)
    with pytest.raises(RelayTestError, match="needs >= 6"):
        ultimate_from_peaks(t, np.sin(2 * np.pi * t / 0.25), relay_torque=1.0)
