"""``teleop bench sim``: is the simulation fast enough and does it agree with the model?

Measures
* ``rtf``: real-time factor (simulated s per wall-clock s) of the standing robot at 1 kHz
  physics with position targets refreshed at 100 Hz, as the robot station drives it;
* ``mass_model_kg`` / ``mass_sim_kg``: total mass in pinocchio and in pybullet;
* ``fk_max_error_mm``: worst disagreement of the hand and sole frames between pinocchio
  and pybullet over random configurations (joints uniform within limits, random base);
* ``camera_frame_ms``: median time to render one eye image at 320x240 and 640x480 with
  the product's eye camera (low-poly rasteriser), and ``pybullet_camera_frame_ms`` with
  pybullet's TinyRenderer for comparison.
"""

from __future__ import annotations

import time

import numpy as np
from tqdm import tqdm

from teleop.robot.model import RobotModel
from teleop.sim.camera import STANDARD_SIZES, CameraIntrinsics, EyeCamera
from teleop.sim.simulator import Simulation

FK_ROLES = ("left_hand", "right_hand", "left_sole", "right_sole")


def measure_rtf(sim: Simulation, robot: RobotModel, seconds: float, control_hz: float = 100.0) -> float:
    """Real-time factor of the standing robot over ``seconds`` of simulated time."""
    sim.reset()
    targets = robot.home_joints()
    steps_per_tick = int(round(1.0 / (control_hz * sim.dt)))
    ticks = int(round(seconds * control_hz))
    start = time.perf_counter()
    for _ in range(ticks):
        sim.state()  # the station reads the state every tick
        sim.set_joint_targets(targets)
        sim.step(steps_per_tick)
    return ticks * steps_per_tick * sim.dt / (time.perf_counter() - start)


def fk_max_error_mm(sim: Simulation, robot: RobotModel, n_configs: int, seed: int = 0,
                    progress: bool = False) -> float:
    """Worst hand/sole position disagreement [mm] between pinocchio and pybullet."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in tqdm(range(n_configs), desc="fk agreement", disable=not progress, leave=False):
        q = robot.random_configuration(rng)
        sim.reset(q)
        robot.update(q)
        for role in FK_ROLES:
            sim_pos = sim.link_position(robot.description.frames[role])
            worst = max(worst, float(np.linalg.norm(sim_pos - robot.position(role))))
    sim.reset()
    return 1000.0 * worst


def camera_frame_ms(sim: Simulation, robot: RobotModel, frames: int, renderer: str = "lowpoly") -> dict[str, float]:
    """Median render time [ms] of the left eye at each standard size.

    ``renderer``: "lowpoly" (the product's eye camera, teleop.sim.lowpoly_render) or
    "pybullet" (pybullet's TinyRenderer, for comparison).
    """
    from teleop.sim.lowpoly_render import LowPolyEyeCamera
    from teleop.sim.scene import add_to_simulation

    out = {}
    if not hasattr(sim, "_bench_scene"):
        sim._bench_scene = add_to_simulation(sim, static=True)  # the table and objects the eye sees
    q = sim.state().q
    q[7 + robot.joint_index("neck_pitch")] = -0.3  # look down at the table and the hands
    for label, (w, h) in STANDARD_SIZES.items():
        if renderer == "lowpoly":
            camera = LowPolyEyeCamera(sim, RobotModel(), "left_eye", CameraIntrinsics(w, h), scene=sim._bench_scene)
        else:
            camera = EyeCamera(sim, robot, "left_eye", CameraIntrinsics(w, h))
        camera.render(q)  # first call builds renderer caches
        times = []
        for _ in range(frames):
            start = time.perf_counter()
            camera.render(q)
            times.append(time.perf_counter() - start)
        out[label] = 1000.0 * float(np.median(times))
    return out


def run(quick: bool = False) -> dict:
    robot = RobotModel()
    with Simulation(robot) as sim:
        result = {
            "rtf": measure_rtf(sim, robot, seconds=1.0 if quick else 5.0),
            "mass_model_kg": robot.total_mass,
            "mass_sim_kg": sim.total_mass(),
            "fk_max_error_mm": fk_max_error_mm(sim, robot, 100 if quick else 1000, progress=not quick),
            "camera_frame_ms": camera_frame_ms(sim, robot, 3 if quick else 20),
            "pybullet_camera_frame_ms": camera_frame_ms(sim, robot, 2 if quick else 5, renderer="pybullet"),
        }
    return result


def format_table(result: dict) -> str:
    cam = result["camera_frame_ms"]
    rows = [
        ("real-time factor (1 kHz physics, 100 Hz control)", f"{result['rtf']:.2f}", ">= 2"),
        ("mass, model [kg]", f"{result['mass_model_kg']:.3f}", ""),
        ("mass, simulator [kg]", f"{result['mass_sim_kg']:.3f}", "within 1%"),
        ("hand/sole FK disagreement, worst [mm]", f"{result['fk_max_error_mm']:.4f}", "< 1"),
        ("eye camera 320x240 [ms/frame]", f"{cam['320x240']:.1f}", "<= 50 (>= 20 fps)"),
        ("eye camera 640x480 [ms/frame]", f"{cam['640x480']:.1f}", ""),
        ("  pybullet TinyRenderer 320x240 [ms/frame]", f"{result['pybullet_camera_frame_ms']['320x240']:.1f}", "(for comparison)"),
        ("  pybullet TinyRenderer 640x480 [ms/frame]", f"{result['pybullet_camera_frame_ms']['640x480']:.1f}", ""),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{'measure':<{width}}  {'value':>10}  target", "-" * (width + 22)]
    lines += [f"{name:<{width}}  {value:>10}  {target}" for name, value, target in rows]
    return "\n".join(lines)
