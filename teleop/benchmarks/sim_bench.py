"""``teleop bench sim``: is the simulation fast enough and does it agree with the model?

Measures
* ``rtf``: real-time factor (simulated s per wall-clock s) of the standing robot at 1 kHz
  physics with 100 Hz commands played to the servos as a spline (a target every physics
  step), as the robot station drives it, with
  the description's servo (``servo``); ``rtf_by_servo`` gives it for both joint servos
  (pybullet's motors, the explicit PD of teleop.sim.servo) measured in alternating
  1 s slices so that a busy machine slows both alike, and ``rtf_cpu_by_servo`` the same
  per CPU second of this process (simulated s / process CPU s: what the machine could do
  if it were not shared);
* ``mass_model_kg`` / ``mass_sim_kg``: total mass in pinocchio and in pybullet;
* ``fk_max_error_mm``: worst disagreement of the hand and sole frames between pinocchio
  and pybullet over random configurations (joints uniform within limits, random base);
* ``camera_frame_ms``: median time to render one eye image at 320x240 and 640x480 with
  the product's eye camera (low-poly rasteriser), and ``pybullet_camera_frame_ms`` with
  pybullet's TinyRenderer for comparison.
"""

from __future__ import annotations

import sys
import time
import weakref
from typing import TYPE_CHECKING

import numpy as np

from teleop.benchmarks.stages import verdict
from teleop.progress import progress_bar
from teleop.robot.model import RobotModel
from teleop.sim.camera import STANDARD_SIZES, CameraIntrinsics, EyeCamera
from teleop.sim.simulator import Simulation
from teleop.sim.target_spline import TickInterpolator

if TYPE_CHECKING:
    from teleop.sim.scene import SimulatedScene

#: The scene :func:`camera_frame_ms` added to each simulation (once: its bodies stay in the world).
_BENCH_SCENES: weakref.WeakKeyDictionary[Simulation, SimulatedScene] = weakref.WeakKeyDictionary()

FK_ROLES = ("left_hand", "right_hand", "left_sole", "right_sole")


def measure_rtf(sim: Simulation, robot: RobotModel, seconds: float, control_hz: float = 100.0,
                cpu: bool = False, reset: bool = True) -> float:
    """Real-time factor of the standing robot over ``seconds`` of simulated time
    (per process CPU second instead of wall-clock second if ``cpu``)."""
    if reset:
        sim.reset()
    targets = robot.home_joints()
    steps_per_tick = int(round(1.0 / (control_hz * sim.dt)))
    ticks = int(round(seconds * control_hz))
    # As the robot station: a new target every physics step, on the spline between ticks.
    interpolator = TickInterpolator(targets)
    clock = time.process_time if cpu else time.perf_counter
    start = clock()
    for _ in range(ticks):
        sim.state()  # the station reads the state every tick
        sim.step_through(*interpolator.targets(targets, steps_per_tick, 1.0 / control_hz))
    return ticks * steps_per_tick * sim.dt / (clock() - start)


def rtf_by_servo(robot: RobotModel, seconds: float, slice_s: float = 1.0) -> tuple[dict, dict]:
    """({servo: wall-clock RTF}, {servo: CPU RTF}) of the standing robot for both servo
    kinds, over ``seconds`` each, in alternating slices (after 0.3 s of settling)."""
    from teleop.sim.simulator import SERVO_KINDS

    sims: dict[str, Simulation] = {}
    for kind in SERVO_KINDS:
        sim = Simulation(robot, visual=False, servo=kind)
        if sim.servo_kind in sims:     # TELEOP_SIM_ACTUATOR runs every simulation on the explicit servo
            sim.close()
            print(f"note: the environment forces the {sim.servo_kind} servo: the other one is not measured "
                  "(unset TELEOP_SIM_ACTUATOR to compare them)", file=sys.stderr)
            continue
        sims[sim.servo_kind] = sim
    wall = {kind: 0.0 for kind in sims}
    cpu = {kind: 0.0 for kind in sims}
    try:
        for sim in sims.values():
            sim.reset()
            sim.step(300)
        slices = max(1, int(round(seconds / slice_s)))
        for _ in range(slices):
            for kind, sim in sims.items():
                w0, c0 = time.perf_counter(), time.process_time()
                measure_rtf(sim, robot, slice_s, reset=False)
                wall[kind] += time.perf_counter() - w0
                cpu[kind] += time.process_time() - c0
        simulated = slices * slice_s
        return ({k: simulated / v for k, v in wall.items()}, {k: simulated / v for k, v in cpu.items()})
    finally:
        for sim in sims.values():
            sim.close()


def fk_max_error_mm(sim: Simulation, robot: RobotModel, n_configs: int, seed: int = 0,
                    progress: bool = False) -> float:
    """Worst hand/sole position disagreement [mm] between pinocchio and pybullet."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in progress_bar(range(n_configs), desc="fk agreement", enabled=progress):
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

    ``renderer``: "lowpoly" (the product's eye camera, teleop.sim.lowpoly) or
    "pybullet" (pybullet's TinyRenderer, for comparison).
    """
    from teleop.sim.lowpoly import LowPolyEyeCamera
    from teleop.sim.scene import add_to_simulation

    out = {}
    if sim not in _BENCH_SCENES:
        _BENCH_SCENES[sim] = add_to_simulation(sim, static=True)  # the table and objects the eye sees
    q = sim.state().q
    q[7 + robot.joint_index("neck_pitch")] = -0.3  # look down at the table and the hands
    for label, (w, h) in STANDARD_SIZES.items():
        camera: LowPolyEyeCamera | EyeCamera
        if renderer == "lowpoly":
            camera = LowPolyEyeCamera(sim, RobotModel(), "left_eye", CameraIntrinsics(w, h), scene=_BENCH_SCENES[sim])
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


def run(quick: bool = False, progress: bool = False) -> dict:
    from teleop.benchmarks.stages import Stages

    stage = Stages("bench sim", 4, progress)
    robot = RobotModel()
    stage("real-time factor, each servo")
    by_servo, by_servo_cpu = rtf_by_servo(robot, seconds=1.0 if quick else 5.0)
    with Simulation(robot) as sim:
        result = {"rtf": by_servo[sim.servo_kind], "servo": sim.servo_kind, "rtf_by_servo": by_servo,
                  "rtf_cpu_by_servo": by_servo_cpu, "mass_model_kg": robot.total_mass,
                  "mass_sim_kg": sim.total_mass()}
        stage("model / simulator kinematics")
        result["fk_max_error_mm"] = fk_max_error_mm(sim, robot, 100 if quick else 1000, progress=False)
        stage("eye camera")
        result["camera_frame_ms"] = camera_frame_ms(sim, robot, 3 if quick else 20)
        stage("pybullet's TinyRenderer on the full meshes")
        result["pybullet_camera_frame_ms"] = camera_frame_ms(sim, robot, 2 if quick else 5, renderer="pybullet")
    stage.done()
    return result


def format_table(result: dict) -> str:
    cam = result["camera_frame_ms"]
    mass_gap = abs(result["mass_sim_kg"] - result["mass_model_kg"]) / result["mass_model_kg"]
    rows = [
        (f"real-time factor (1 kHz physics, 100 Hz control, {result['servo']} servo)", f"{result['rtf']:.2f}",
         f">= 2: {verdict(result['rtf'] >= 2)}"),
    ]
    for kind, value in result["rtf_by_servo"].items():
        rows.append((f"  {kind} servo: wall clock / per CPU second",
                     f"{value:.2f} / {result['rtf_cpu_by_servo'][kind]:.2f}", ""))
    rows += [
        ("mass, model [kg]", f"{result['mass_model_kg']:.3f}", ""),
        ("mass, simulator [kg]", f"{result['mass_sim_kg']:.3f}", f"within 1%: {verdict(mass_gap <= 0.01)}"),
        ("hand/sole FK disagreement, worst [mm]", f"{result['fk_max_error_mm']:.4f}",
         f"< 1: {verdict(result['fk_max_error_mm'] < 1)}"),
        ("eye camera 320x240 [ms/frame]", f"{cam['320x240']:.1f}",
         f"<= 50 (>= 20 fps): {verdict(cam['320x240'] <= 50)}"),
        ("eye camera 640x480 [ms/frame]", f"{cam['640x480']:.1f}", ""),
        ("  pybullet TinyRenderer 320x240 [ms/frame] (1)", f"{result['pybullet_camera_frame_ms']['320x240']:.1f}", ""),
        ("  pybullet TinyRenderer 640x480 [ms/frame] (1)", f"{result['pybullet_camera_frame_ms']['640x480']:.1f}", ""),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{'measure':<{width}}  {'value':>10}  target", "-" * (width + 22)]
    lines += [f"{name:<{width}}  {value:>10}  {target}" for name, value, target in rows]
    lines.append("(1) the full-detail render (~415k triangles of the iCub meshes) that the eye camera's ~6,000 "
                 "(convex hulls, teleop/sim/lowpoly) replace: what detail costs, not a like-for-like peer")
    return "\n".join(lines)
