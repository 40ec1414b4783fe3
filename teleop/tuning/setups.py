"""The four simulated setups of the reference's evaluation (§4.1, Fig. 4.1), on our iCub.

The thesis gives its force limits, friction and masses only in an image (Fig. 4.1, lost), so
the numbers here are ours, chosen to keep the *intent* of each setup (reference A7 table):

| # | gravity | torque limits (× icub.toml efforts) | joint friction (viscous, Coulomb) | payload |
|---|---------|-------------------------------------|-----------------------------------|---------|
| 1 | off     | 10× ("very high")                   | none                              | none    |
| 2 | 9.81    | 1× (realistic: 30/30/20/20/5 N m)   | 0.05 N m s/rad, 0.05 N m          | none    |
| 3 | 9.81    | 0.2× ("severely lowered")           | 70 % of setup 2 ("slightly reduced") | none |
| 4 | 9.81    | 1×                                  | as setup 2                        | 10 kg in the left hand |

The payload is added to the hand link's own mass with pybullet ``changeDynamics`` (a 10 kg
solid sphere of 5 cm radius at the hand's centre of mass: inertia 2/5 m r² added on each
axis), so it is carried by every joint of the arm, as in §4.1.4.
"""

from __future__ import annotations

from dataclasses import dataclass

GRAVITY = 9.81


@dataclass(frozen=True)
class Setup:
    """One experimental setup. Units: gravity [m/s²], friction viscous [N m s/rad] and
    Coulomb [N m], payload [kg]; ``torque_scale`` multiplies the description's effort limits."""

    number: int
    name: str
    gravity: float
    torque_scale: float
    viscous: float
    coulomb: float
    payload_kg: float = 0.0


SETUPS: dict[int, Setup] = {
    1: Setup(1, "no gravity, very high torque limits, no friction", 0.0, 10.0, 0.0, 0.0),
    2: Setup(2, "gravity, realistic torque limits, some friction", GRAVITY, 1.0, 0.05, 0.05),
    3: Setup(3, "gravity, severely limited torque (20 %), slightly less friction", GRAVITY, 0.2, 0.035, 0.035),
    4: Setup(4, "as setup 2 with a 10 kg payload in the left hand", GRAVITY, 1.0, 0.05, 0.05, 10.0),
}

#: The tested limb (reference §4.1: shoulder ×3, elbow, hand), distal joint last.
LEFT_ARM = ("l_shoulder_pitch", "l_shoulder_roll", "l_shoulder_yaw", "l_elbow", "l_wrist_prosup")
#: Payload link and size (see the module docstring).
PAYLOAD_LINK = "l_hand"
PAYLOAD_RADIUS_M = 0.05
