"""A fast CPU renderer of what the robot's eye cameras see: low-poly robot, task scene, ground.

pybullet's TinyRenderer needs ~95 ms for a 320x240 frame of the full iCub meshes (~415k
triangles). The eye camera needs far less detail, so this module draws

* the robot as one small convex hull per visual mesh of its URDF (<= 116 triangles each;
  the small hand meshes, ~400 triangles, are kept as they are), built once and cached on
  disk, placed by the pinocchio model's kinematics: ~6,000 triangles in all;
* the scene's primitive shapes (:mod:`teleop.sim.scene`), tessellated into tiles;
* the ground as a checkerboard texture mapped by one homography (cv2.warpPerspective),
  pre-filtered and hazed with distance so it does not alias; a sky gradient above the
  horizon (cv2.warpAffine of a colour ramp);
* sun shadows of every part on the ground and on the table top (one convex blob per
  part), the operator's cue for how high a hand is above the table;

with flat Lambert shading and the painter's algorithm (faces sorted far to near, filled
by cv2.fillConvexPoly with sub-pixel precision and anti-aliasing). Images are (H, W, 3)
uint8 RGB.

Painter's algorithm is exact for non-intersecting convex parts seen from outside and good
enough here: robot hulls are convex, and the table top's plane splits the drawing order
(everything on the far side of it first, whatever the face sizes), so a cube on the
table or a hand above it always comes out in front of the table top.

Frames: world = stance frame (x forward, y left, z up). Eye frames look along +x with +z
up; internally the camera frame follows OpenCV (x right, y down, z forward).

Measured (``python -m teleop.sim.lowpoly``, shared 2-core machine, medians): ~5-10 ms per
320x240 frame against ~115 ms for pybullet's TinyRenderer.

Modules: :mod:`.meshes` (simplified and primitive meshes), :mod:`.robot_visuals` (the
robot's, from its URDF), :mod:`.ground` (ground and sky), :mod:`.renderer` (shading, depth
order, shadows), :mod:`.eye_camera` (the robot's eye camera).
"""

from teleop.sim.lowpoly.eye_camera import LowPolyEyeCamera
from teleop.sim.lowpoly.ground import GROUND_SHADOW, GroundStyle
from teleop.sim.lowpoly.meshes import (DEFAULT_HULL_VERTICES, DEFAULT_KEEP_TRIANGLES, LowPolyMesh, convex_hull_mesh,
                                       load_lowpoly_mesh, mesh_cache_dir, primitive_mesh, read_stl)
from teleop.sim.lowpoly.renderer import EYE_FROM_CV, TABLE_SHADOW, Lighting, LowPolyRenderer
from teleop.sim.lowpoly.robot_visuals import RobotVisual, robot_visuals

__all__ = [
    "DEFAULT_HULL_VERTICES", "DEFAULT_KEEP_TRIANGLES", "EYE_FROM_CV", "GROUND_SHADOW", "TABLE_SHADOW", "GroundStyle",
    "Lighting", "LowPolyEyeCamera", "LowPolyMesh", "LowPolyRenderer", "RobotVisual", "convex_hull_mesh",
    "load_lowpoly_mesh", "mesh_cache_dir", "primitive_mesh", "read_stl", "robot_visuals",
]
