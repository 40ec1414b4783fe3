"""The robot's eye camera drawn by the low-poly renderer: a fast stand-in for pybullet's."""

from __future__ import annotations

import numpy as np
import pinocchio as pin

from teleop.robot.model import RobotModel
from teleop.sim.camera import CameraIntrinsics, finite_configuration
from teleop.sim.lowpoly.renderer import LowPolyRenderer
from teleop.sim.scene import SceneObject, SimulatedScene
from teleop.sim.simulator import Simulation


class LowPolyEyeCamera:
    """Drop-in fast replacement of :class:`teleop.sim.camera.EyeCamera`.

    Differences from ``EyeCamera``:

    * the robot is drawn at the configuration ``q`` given to :meth:`render` (``EyeCamera``
      takes only the eye pose from ``q`` and draws the robot where the physics has it; with
      the default ``q`` = measured state the two agree);
    * it does not touch ``model.data``: the kinematics run in its own pinocchio data, so it
      can render in another thread than the controller's. (With ``q=None`` or a
      :class:`~teleop.sim.scene.SimulatedScene` it also reads pybullet, as ``EyeCamera``
      does; with an explicit ``q`` and a list of objects it makes no pybullet call.)
    * the ground extends to a hazy horizon rather than stopping at ``intrinsics.far``.

    Args:
        sim: the simulation whose measured state :meth:`render` shows by default (may be
            None if ``q`` is always given).
        model: the robot model.
        eye: ``"left_eye"`` or ``"right_eye"`` (the eye of :meth:`render`).
        intrinsics: image size and field of view (``near``/``far`` clip robot and scene).
        scene: what to draw besides the robot: a list of scene objects, a
            :class:`~teleop.sim.scene.SimulatedScene` (poses read from the physics every
            frame) or None.
        hide_own_head: skip the meshes that move with the eye (the head shell around it).
        **renderer_options: passed on to :class:`LowPolyRenderer` (lighting, ground,
            max_hull_vertices, keep_triangles, tile, antialias, shadows, cache_dir).
    """

    EYES = ("left_eye", "right_eye")

    def __init__(self, sim: Simulation | None, model: RobotModel, eye: str = "left_eye",
                 intrinsics: CameraIntrinsics | None = None,
                 scene: list[SceneObject] | SimulatedScene | None = None,
                 hide_own_head: bool = True, **renderer_options) -> None:
        if eye not in self.EYES:
            raise ValueError(f"eye must be one of {self.EYES}, not {eye!r}")
        self.sim, self.model, self.eye = sim, model, eye
        self.renderer = LowPolyRenderer(model, scene, intrinsics, **renderer_options)
        self.intrinsics = self.renderer.intrinsics
        self._data = model.model.createData()
        frames = model.model.frames
        self._hidden = {}
        for name in self.EYES:
            hidden = np.zeros(self.renderer.n_parts, bool)
            if hide_own_head:
                eye_joint = frames[model.frame_id(name)].parentJoint
                hidden[: self.renderer.n_robot_parts] = [
                    frames[v.frame_id].parentJoint == eye_joint for v in self.renderer.visuals]
            self._hidden[name] = hidden

    def _poses(self, q: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        if q is None:
            if self.sim is None:
                raise ValueError("no simulation to read the configuration from: pass q")
            q = self.sim.state().q
        pin.framesForwardKinematics(self.model.model, self._data, finite_configuration(q))
        return self.renderer.part_poses(self._data)

    def eye_placement(self, eye: str | None = None) -> pin.SE3:
        """World pose of an eye frame at the last rendered configuration."""
        return self._data.oMf[self.model.frame_id(eye or self.eye)]

    def render(self, q: np.ndarray | None = None) -> np.ndarray:
        """(H, W, 3) uint8 RGB image from the eye at ``q`` (nq,) (default: measured state)."""
        part_R, part_t = self._poses(q)
        return self.renderer.render(self.eye_placement(), part_R, part_t, self._hidden[self.eye])

    def render_stereo(self, q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(left, right) images, each (H, W, 3) uint8 RGB, at one configuration ``q``
        (kinematics and scene poses computed once for both eyes)."""
        part_R, part_t = self._poses(q)
        left, right = (self.renderer.render(self.eye_placement(name), part_R, part_t, self._hidden[name])
                       for name in self.EYES)
        return left, right
