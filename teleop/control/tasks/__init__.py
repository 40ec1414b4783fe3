"""Tasks of the whole-body controller, one class per module (pink style)."""

from teleop.control.tasks.base import InvalidTarget, Task
from teleop.control.tasks.com import ComTask
from teleop.control.tasks.frame_orientation import FrameOrientationTask
from teleop.control.tasks.frame_pose import FramePoseTask
from teleop.control.tasks.frame_position import FramePositionTask
from teleop.control.tasks.posture import PostureTask
from teleop.control.tasks.waist_height import WaistHeightTask

__all__ = ["Task", "InvalidTarget", "ComTask", "FrameOrientationTask", "FramePoseTask",
           "FramePositionTask", "PostureTask", "WaistHeightTask"]
