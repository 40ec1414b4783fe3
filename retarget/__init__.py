"""Human motion -> humanoid robot references (thesis Ch. 2), standalone.

Readers turn motion files and devices into one canonical :class:`HumanMotion`
(:mod:`retarget.human`); the :class:`Retargeter` maps it onto a robot described by a
:class:`RobotTarget`, producing :class:`RobotReferences` / :class:`ReferenceTrajectory`
(:mod:`retarget.references`); the :class:`ZmpPrefilter` makes the CoM reference
ZMP-feasible on the robot (:class:`ZmpCorrector`: its Eq. 2.15 step alone). This package
does not import the application (``teleop``). User guide, with examples: retarget/README.md.
"""

from .calibration import HumanCalibration, calibrate
from .human import SEGMENTS, TRACKER_SEGMENTS, HumanMotion, MotionFormatError
from .mapping import Retargeter, retarget_motion
from .readers import read_motion
from .references import ReferenceTrajectory, RobotReferences
from .robot_target import RobotTarget
from .zmp import ZmpCorrector, ZmpPrefilter

__all__ = ["HumanMotion", "MotionFormatError", "SEGMENTS", "TRACKER_SEGMENTS", "read_motion",
           "RobotTarget", "HumanCalibration", "calibrate", "Retargeter", "retarget_motion",
           "RobotReferences", "ReferenceTrajectory", "ZmpCorrector", "ZmpPrefilter"]
