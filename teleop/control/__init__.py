"""Whole-body control of the teleoperated humanoid: velocity IK-QP over a stack of tasks.

Thesis Eqs. 1.1-1.3 and 1.16 (see docs in ``controller.py``): tasks with weights inside a
priority level, strict priorities between levels (cascade of QPs), both soles as exact
contacts, joint position and velocity limits and the CoM inside the support polygon as
constraints, DAQP as the QP solver. Stacks are TOML files (``stacks/``).

Main entry points:

* :class:`WholeBodyController` - the controller over a stack (``step(q=None, dt=None)``).
* :class:`ReferenceTracker` - drives it from :class:`retarget.references.RobotReferences`.
* :func:`run_closed_loop` - a run in the pybullet simulation with balance/tracking metrics.
"""

from teleop.control.closed_loop import run_closed_loop, synthetic_references
from teleop.control.controller import ControlOutput, SolveStatus, WholeBodyController
from teleop.control.stack import StackConfig, StackError, list_presets, load_stack
from teleop.control.tasks import (ComTask, FrameOrientationTask, FramePoseTask, FramePositionTask, InvalidTarget,
                                  PostureTask, Task, WaistHeightTask)
from teleop.control.timing import TickTimings, TimingWindow
from teleop.control.tracker import OutOfWorkspace, ReferenceTracker, WorkspaceLimits, references_from_configuration

__all__ = [
    "WholeBodyController", "ControlOutput", "SolveStatus", "ReferenceTracker", "WorkspaceLimits",
    "OutOfWorkspace", "references_from_configuration", "run_closed_loop", "synthetic_references",
    "StackConfig", "StackError", "load_stack", "list_presets", "Task", "InvalidTarget", "ComTask",
    "FrameOrientationTask", "FramePoseTask", "FramePositionTask", "PostureTask", "WaistHeightTask",
    "TickTimings", "TimingWindow",
]
