"""The seven Ziegler–Nichols-family tuning rules of the reference (§3.5.2, table in A6).

The coefficients are [not in source] in the thesis; they are the standard ZN-family table the
reference points to (row names match). Each maps the ultimate gain K_u [N m/rad] and the
ultimate period T_u [s] from a relay test to parallel-form gains.
"""

from __future__ import annotations

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
    if not (ku > 0 and tu > 0):
        raise ValueError(f"K_u and T_u must be > 0, got K_u={ku}, T_u={tu}")
    cp, ci, cd = HEURISTICS[name]
    return PidGains(cp * ku, ci * ku / tu, cd * ku * tu)


def all_heuristic_gains(ku: float, tu: float) -> dict[str, PidGains]:
    """Every rule's gains (the reference's ``LastTuningData``)."""
    return {name: heuristic_gains(name, ku, tu) for name in HEURISTICS}
