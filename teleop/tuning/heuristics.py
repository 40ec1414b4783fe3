"""The seven Ziegler–Nichols-family tuning rules of the reference (§3.5.2, table in A6).

The coefficients are [not in source] in the thesis; they are the standard ZN-family table the
reference points to (row names match). Each maps the ultimate gain K_u [N m/rad] and the
ultimate period T_u [s] from a relay test to parallel-form gains.

The table is stored in parallel form (K_i and K_d as multiples of K_u/T_u and K_u T_u), as the
reference's A6 table writes it. In the textbook's standard form u = K_p(e + (1/T_i)∫e + T_d ė)
(K_i = K_p/T_i, K_d = K_p T_d, :meth:`PidGains.to_standard`) the rows are: Classic T_i = T_u/2,
T_d = T_u/8; Pessen T_i = 0.4 T_u, T_d = 0.15 T_u; Some/No overshoot T_i = T_u/2, T_d = T_u/3
(0.11/0.33 and 0.066/0.2, the table's two-digit rounding of 1/3); PI T_i = T_u/1.2; PD
T_d = T_u/8.
"""

from __future__ import annotations

import numpy as np

from teleop.tuning.pid import PidGains

#: name -> (c_p, c_i, c_d) with K_p = c_p K_u, K_i = c_i K_u / T_u, K_d = c_d K_u T_u.
HEURISTICS: dict[str, tuple[float, float, float]] = {
    "Classic": (0.6, 1.2, 0.075),
    "PessenIntegralRule": (0.7, 1.75, 0.105),
    "SomeOvershoot": (0.33, 0.66, 0.11),
    "NoOvershoot": (0.2, 0.4, 0.066),
    "PControl": (0.5, 0.0, 0.0),
    "PIControl": (0.45, 0.54, 0.0),
    "PDControl": (0.8, 0.0, 0.10),
}

#: Our heuristic names -> the row labels of the reference's result tables (§4.1).
REFERENCE_LABELS = {
    "Classic": "Classic", "PessenIntegralRule": "Pessen", "SomeOvershoot": "Some Overshoot",
    "NoOvershoot": "No Overshoot", "PControl": "P-Control", "PIControl": "PI-Control",
    "PDControl": "PD-Control",
}


def heuristic_gains(name: str, ku: float, tu: float) -> PidGains:
    """Gains of rule ``name`` for ultimate gain ``ku`` [N m/rad] and period ``tu`` [s]."""
    if name not in HEURISTICS:
        raise KeyError(f"unknown heuristic {name!r}; known: {', '.join(HEURISTICS)}")
    # Each argument named on its own; inf is refused here too (it gave an inf K_p or a NaN
    # K_i = c_i·inf/inf, reported by PidGains as a bad "kp"/"ki", not as a bad K_u or T_u).
    for arg, value in (("ku (K_u)", ku), ("tu (T_u)", tu)):
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"{arg} must be finite and > 0, got {value!r}")
    cp, ci, cd = HEURISTICS[name]
    return PidGains(cp * ku, ci * ku / tu, cd * ku * tu)


def all_heuristic_gains(ku: float, tu: float) -> dict[str, PidGains]:
    """Every rule's gains (the reference's ``LastTuningData``)."""
    return {name: heuristic_gains(name, ku, tu) for name in HEURISTICS}
