"""The robot's eye cameras, rendered headless by pybullet.

Each eye is a frame of the robot model (``left_eye`` / ``right_eye`` in the description),
stance-aligned at the home posture: the camera looks along the frame's +x axis with +z up.
Images are (H, W, 3) uint8 RGB.

pybullet's CPU renderer (TinyRenderer) is used headless; where pybullet has a hardware
OpenGL context (GUI mode) its OpenGL renderer is used instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from teleop.robot.model import RobotModel
from teleop.sim.pybullet_module import pb
from teleop.sim.simulator import Simulation

#: Image sizes the product uses, (width, height).
STANDARD_SIZES = {"320x240": (320, 240), "640x480": (640, 480)}


@dataclass
class CameraIntrinsics:
    """Pinhole camera: image size [px], vertical field of view [deg], clipping [m]."""

    width: int = 320
    height: int = 240
    fov_deg: float = 60.0
    near: float = 0.02
    far: float = 6.0

    def __post_init__(self) -> None:
        # Checked here, so that a bad size is named instead of surfacing as a singular
        # matrix or a division by zero deep in a renderer.
        if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1
                   for n in (self.width, self.height)):
            raise ValueError(f"camera image size must be whole pixels >= 1, got {self.width}x{self.height}")
        if not 0.0 < self.fov_deg < 180.0:
            raise ValueError(f"camera field of view must be in (0, 180) degrees, got {self.fov_deg}")
        if not 0.0 < self.near < self.far < np.inf:
            raise ValueError(f"camera clipping needs 0 < near < far (finite), got near {self.near}, far {self.far}")

    def projection_matrix(self) -> list[float]:
        return pb.computeProjectionMatrixFOV(self.fov_deg, self.width / self.height, self.near, self.far)

    def matrix(self) -> np.ndarray:
        """(3, 3) intrinsic matrix K [px] of this camera."""
        fy = 0.5 * self.height / np.tan(np.radians(self.fov_deg) / 2)
        return np.array([[fy, 0, self.width / 2], [0, fy, self.height / 2], [0, 0, 1.0]])


def finite_configuration(q: np.ndarray) -> np.ndarray:
    """``q`` (nq,) as floats; ValueError if any value is NaN or infinite (a render at such
    a pose would be a blank image, passed on as if it were the robot's view)."""
    q = np.asarray(q, dtype=float)
    if not np.all(np.isfinite(q)):
        raise ValueError(f"cannot render the eye camera at a configuration with non-finite values "
                         f"(indices {np.flatnonzero(~np.isfinite(q)).tolist()})")
    return q


class EyeCamera:
    """Renders one eye of the simulated robot.

    Args:
        sim: the simulation to render.
        model: the robot model (for the eye frame at the measured configuration). It is
            updated by :meth:`render` with the simulator's measured state.
        eye: ``"left_eye"`` or ``"right_eye"``.
        intrinsics: image size and field of view.
    """

    def __init__(self, sim: Simulation, model: RobotModel, eye: str = "left_eye",
                 intrinsics: CameraIntrinsics | None = None) -> None:
        self.sim, self.model, self.eye = sim, model, eye
        self.intrinsics = intrinsics or CameraIntrinsics()
        self._projection = self.intrinsics.projection_matrix()
        gui = pb.getConnectionInfo(sim.client)["connectionMethod"] == pb.GUI
        self._renderer = pb.ER_BULLET_HARDWARE_OPENGL if gui else pb.ER_TINY_RENDERER

    def view_matrix(self, q: np.ndarray) -> list[float]:
        """pybullet view matrix of the eye at configuration ``q``."""
        self.model.update(finite_configuration(q))
        placement = self.model.placement(self.eye)
        eye = placement.translation
        forward, up = placement.rotation[:, 0], placement.rotation[:, 2]
        return pb.computeViewMatrix(eye.tolist(), (eye + forward).tolist(), up.tolist())

    def render(self, q: np.ndarray | None = None) -> np.ndarray:
        """(H, W, 3) uint8 RGB image from the eye at ``q`` (default: measured state)."""
        q = self.sim.state().q if q is None else q
        w, h = self.intrinsics.width, self.intrinsics.height
        _, _, rgba, _, _ = pb.getCameraImage(
            w, h, self.view_matrix(q), self._projection, renderer=self._renderer,
            flags=pb.ER_NO_SEGMENTATION_MASK, physicsClientId=self.sim.client)
        return np.asarray(rgba, dtype=np.uint8).reshape(h, w, 4)[:, :, :3].copy()
