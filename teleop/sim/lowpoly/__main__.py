"""``python -m teleop.sim.lowpoly [--frames N] [--images DIR]``: pybullet's eye camera against
the low-poly one, timed on the default scene (``teleop bench sim`` times the product's use)."""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np

from teleop.robot.model import RobotModel
from teleop.sim.camera import STANDARD_SIZES, CameraIntrinsics, EyeCamera
from teleop.sim.lowpoly.eye_camera import LowPolyEyeCamera
from teleop.sim.scene import add_to_simulation
from teleop.sim.simulator import Simulation


def example_postures(model: RobotModel) -> dict[str, np.ndarray]:
    """(nq,) configurations for demos and benchmarks: standing at home with the head
    tilted 0.5 rad down towards the table ("home"), and the same with both arms raised
    forward into view ("reach")."""
    home = model.home_configuration()
    home[7 + model.joint_index("neck_pitch")] = -0.5
    reach = home.copy()
    for side in "lr":
        reach[7 + model.joint_index(f"{side}_shoulder_pitch")] = -1.0
        reach[7 + model.joint_index(f"{side}_shoulder_roll")] = 0.2
        reach[7 + model.joint_index(f"{side}_elbow")] = 0.5
    return {"home": home, "reach": reach}


def benchmark(frames: int = 20, image_dir: Path | None = None) -> dict[tuple[str, str, str], float]:
    """Time pybullet's :class:`~teleop.sim.camera.EyeCamera` against :class:`LowPolyEyeCamera`
    (one eye, and both eyes with :meth:`LowPolyEyeCamera.render_stereo`) on the default
    scene, in the :func:`example_postures`.

    The renderers take turns frame by frame, so that the load of a shared machine weighs
    on all of them alike.

    Args:
        frames: frames per measurement (the median is reported).
        image_dir: if given, write ``render_<renderer>_<posture>_<width>.png`` there.

    Returns:
        {(renderer, posture, size): median wall-clock ms per frame}.
    """
    model = RobotModel()
    results = {}
    with Simulation(model) as sim:
        scene = add_to_simulation(sim)
        for posture, q in example_postures(model).items():
            sim.reset(q)  # pybullet draws the robot where the physics has it
            for size, (width, height) in STANDARD_SIZES.items():
                intrinsics = CameraIntrinsics(width, height)
                pybullet_camera = EyeCamera(sim, model, intrinsics=intrinsics)
                lowpoly_camera = LowPolyEyeCamera(sim, model, intrinsics=intrinsics, scene=scene)
                renders = {"pybullet": lambda: pybullet_camera.render(q), "lowpoly": lambda: lowpoly_camera.render(q),
                           "lowpoly-stereo": lambda: lowpoly_camera.render_stereo(q)}
                times: dict[str, list[float]] = {name: [] for name in renders}
                for _ in range(frames + 1):  # the first round warms up
                    for name, render in renders.items():
                        start = time.perf_counter()
                        render()
                        times[name].append(time.perf_counter() - start)
                for name, values in times.items():
                    results[(name, posture, size)] = 1000 * float(np.median(values[1:]))
                if image_dir is not None:
                    for name, camera_render in (("pybullet", pybullet_camera.render),
                                                ("lowpoly", lowpoly_camera.render)):
                        path = Path(image_dir) / f"render_{name}_{posture}_{width}.png"
                        cv2.imwrite(str(path), camera_render(q)[:, :, ::-1])
        sim.reset()
    return results


def main(argv: list[str] | None = None) -> None:
    """``python -m teleop.sim.lowpoly [--frames N] [--images DIR]``: print the
    benchmark table."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--images", type=Path, default=None, help="directory for example PNGs")
    args = parser.parse_args(argv)
    results = benchmark(args.frames, args.images)
    print(f"{'renderer':10s} {'posture':8s} {'size':8s} {'ms/frame':>9s} {'fps':>6s}")
    for (renderer, posture, size), ms in results.items():
        print(f"{renderer:10s} {posture:8s} {size:8s} {ms:9.1f} {1000 / ms:6.0f}")


if __name__ == "__main__":
    main()
