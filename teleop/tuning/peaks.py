"""Peak detection (reference §3.3.3): decimate, detect extrema, drop detections too close
to the previous peak. Used to count relay-test peaks and follow their amplitude.

The reference gives no thresholds ("set in code"); ours are arguments. Three-point finite
differences on the raw samples give false positives on noise (§3.3.3), hence the decimation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Peaks:
    """Detected peaks. index: (P,) sample indices into the original signal; value: (P,)
    signal values there; sign: (P,) +1 for a maximum, −1 for a minimum."""

    index: np.ndarray
    value: np.ndarray
    sign: np.ndarray


def detect_peaks(signal: np.ndarray, decimation: int = 2, min_separation: int = 5) -> Peaks:
    """Peaks of a (N,) signal.

    Args:
        signal: (N,) samples.
        decimation: keep every ``decimation``-th sample (step 1).
        min_separation: a detection fewer than this many original samples after the last
            kept peak is dropped (step 3). Keeping the first of a cluster places the peak
            slightly early, which the reference calls negligible.
    """
    x = np.asarray(signal, dtype=float)
    # Whole sample counts, each named: a fractional decimation made float indices (an
    # IndexError deep inside numpy), a NaN one passed the old "< 1" check.
    if not (isinstance(decimation, (int, np.integer)) and decimation >= 1):
        raise ValueError(f"decimation must be a whole number of samples >= 1, got {decimation!r}")
    if not (isinstance(min_separation, (int, np.integer)) and min_separation >= 0):
        raise ValueError(f"min_separation must be a whole number of samples >= 0, got {min_separation!r}")
    if x.ndim != 1 or not np.all(np.isfinite(x)):
        raise ValueError("peak detection needs a 1-D signal of finite samples (NaN or inf found)")
    kept = np.arange(0, len(x), decimation)
    y = x[kept]
    if len(y) < 3:
        return Peaks(np.zeros(0, int), np.zeros(0), np.zeros(0, int))
    slope = np.sign(np.diff(y))
    # Carry the last non-zero slope over flat stretches so a plateau counts once.
    for i in range(1, len(slope)):
        if slope[i] == 0:
            slope[i] = slope[i - 1]
    turns = np.nonzero(slope[1:] * slope[:-1] < 0)[0] + 1  # index into y
    index: list[int] = []
    sign: list[int] = []
    for k in turns:
        original = int(kept[k])
        if index and original - index[-1] < min_separation:
            continue
        index.append(original)
        sign.append(1 if slope[k - 1] > 0 else -1)
    at = np.array(index, dtype=int)
    return Peaks(at, x[at] if len(at) else np.zeros(0), np.array(sign, dtype=int))
