"""Recorder benchmark: CPU cost at full rate, and data lost when the process is SIGKILLed.

(a) CPU. Two subprocesses run the same full-rate loop for the same time, one recording
    and one not (the idle baseline still builds every message, so only the recorder's work
    differs): 100 Hz references, 100 Hz robot state (32 joints), 30 frames/s of pre-encoded
    textured 640x480 JPEGs (~100 kB, all different), 10 Hz network statistics. Each child
    measures its own process CPU time over the loop only (imports and set-up excluded); the
    difference divided by the wall time of the loop is the recorder's share of one core
    (writer thread + the callers' snapshot/enqueue cost). Target: <= 0.10. The full run
    also measures every channel at once (adding 100 Hz delivered and compensated commands
    and 60 Hz operator input, more than either station records), and each child reports
    how late its 100 Hz ticks wake up (p99), the recorder's effect on a control loop.
(b) Crash. A subprocess records the same workload with the wall clock, is SIGKILLed after a
    few seconds, and the file is recovered; the seconds between the last recovered log time
    and the kill are what was lost. Target: <= 1 s.

Run: ``python -m teleop.benchmarks.record_bench [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

CPU_TARGET = 0.10  # fraction of one core
LOSS_TARGET_S = 1.0

_REPO_ROOT = Path(__file__).resolve().parents[2]

# Full-rate workload [Hz].
CONTROL_RATE_HZ = 100.0  # references, delivered, compensated, robot state
OPERATOR_RATE_HZ = 60.0
CAMERA_FPS = 30.0
NETWORK_RATE_HZ = 10.0
N_JOINTS = 32


def make_textured_jpegs(count: int = 32, width: int = 640, height: int = 480, quality: int = 85,
                        seed: int = 0) -> list[bytes]:
    """Camera-like JPEGs: smooth colour regions, edges and sensor noise (~80-100 kB each)."""
    import cv2

    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(count):
        coarse = rng.integers(0, 256, (height // 16, width // 16, 3), dtype=np.uint8)
        image = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC).astype(np.float32)
        image += rng.normal(0.0, 10.0, image.shape)
        image = np.clip(image, 0, 255).astype(np.uint8)
        for _ in range(12):
            p1, p2 = rng.integers(0, min(width, height), 2), rng.integers(0, min(width, height), 2)
            cv2.rectangle(image, tuple(int(v) for v in p1), tuple(int(v) for v in p2),
                          tuple(int(v) for v in rng.integers(0, 256, 3)), 2)
        frames.append(cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])[1].tobytes())
    return frames


# ------------------------------------------------------------------------- child side


def _workload(mode: str, duration_s: float, frames_dir: Path, output: Path | None, announce: bool,
              channels: str = "core") -> dict:
    """The full-rate loop; records when ``mode == "record"``. Returns CPU/wall figures.

    ``channels``: "core" = references, robot state, camera, network statistics (the
    benchmark's specified workload); "all" adds delivered and compensated commands and
    operator input (more than either station records).
    """
    every_channel = channels == "all"
    from retarget.human import SEGMENTS, HumanMotion
    from retarget.references import FLAT_SIZE, RobotReferences
    from teleop.record import CameraFrame, Recorder, RobotStateSample

    frames = [p.read_bytes() for p in sorted(frames_dir.glob("*.jpg"))]
    rng = np.random.default_rng(1)
    base_refs = rng.normal(0, 0.3, FLAT_SIZE)
    positions = rng.normal(0, 0.5, (1, len(SEGMENTS), 3))
    orientations = np.tile([1.0, 0.0, 0.0, 0.0], (1, len(SEGMENTS), 1))
    joint_names = tuple(f"joint_{j}" for j in range(N_JOINTS))
    recorder = None
    if mode == "record":
        if output is None:
            raise ValueError("the record mode needs an output path")
        recorder = Recorder(output)

    period = 1.0 / CONTROL_RATE_HZ
    start = time.monotonic()
    cpu_start = time.process_time()
    next_operator = next_frame = next_network = start
    tick = 0
    lateness = []  # how late each control tick woke up [s]: the recorder's effect on the loop
    while True:
        due = start + tick * period
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        now = time.monotonic()
        if now - start >= duration_s:
            break
        lateness.append(now - due)
        t = now - start
        # The control-rate messages, built in both modes.
        flat = base_refs + 0.1 * np.sin(t + np.arange(FLAT_SIZE))
        refs = RobotReferences.from_flat(t, flat)
        delivered = RobotReferences.from_flat(t - 0.2, flat)
        compensated = RobotReferences.from_flat(t, flat * 1.01)
        state = RobotStateSample(t, np.sin(t + np.arange(N_JOINTS)), np.cos(t + np.arange(N_JOINTS)),
                                 np.array([0.01, 0.0, 0.55]), np.array([0.012, -0.003]), joint_names)
        if recorder is not None:
            recorder.log_references(refs)
            recorder.log_robot_state(state)
            if every_channel:
                recorder.log_delivered_command(delivered)
                recorder.log_compensated_command(compensated)
        if every_channel and now >= next_operator:
            motion = HumanMotion(np.array([t]), SEGMENTS, positions + 0.01 * t, orientations)
            if recorder is not None:
                recorder.log_operator_input(motion, 0)
            next_operator += 1.0 / OPERATOR_RATE_HZ
        if now >= next_frame:
            frame = CameraFrame(t, frames[tick % len(frames)], "jpeg", "head_camera")
            if recorder is not None:
                recorder.log_camera_frame(frame, camera="head")
            next_frame += 1.0 / CAMERA_FPS
        if now >= next_network:
            stats = {"delay_s": 0.2 + 0.01 * np.sin(t), "jitter_s": 0.01, "loss_fraction": 0.001,
                     "bandwidth_bps": 4.2e6}
            if recorder is not None:
                recorder.log_network_stats(stats)
            next_network += 1.0 / NETWORK_RATE_HZ
        if tick == 0 and announce:
            print(f"recording {time.time_ns()}", flush=True)
        tick += 1
    result = {"mode": mode, "ticks": tick}
    if recorder is not None:
        assert output is not None   # the recorder writes to it
        recorded = recorder.close()
        result.update(messages=recorded.written, dropped=recorded.dropped_total, writer_cpu_s=recorded.writer_cpu_s,
                      bytes=output.stat().st_size)
    result.update(cpu_s=time.process_time() - cpu_start, wall_s=time.monotonic() - start,
                  lateness_p99_ms=float(np.percentile(lateness, 99)) * 1e3,
                  lateness_max_ms=float(np.max(lateness)) * 1e3,
                  late_over_2ms=int(np.sum(np.asarray(lateness) > 2e-3)))
    return result


def _child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", choices=("record", "baseline"), required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--frames", type=Path, required=True)
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--announce", action="store_true")
    parser.add_argument("--channels", choices=("core", "all"), default="core")
    args = parser.parse_args(argv)
    result = _workload(args.child, args.duration, args.frames, args.output, args.announce, args.channels)
    print("result " + json.dumps(result), flush=True)
    return 0


# ------------------------------------------------------------------------ parent side


def _child_command(mode: str, duration_s: float, frames_dir: Path, output: Path | None,
                   announce: bool = False, channels: str = "core") -> list[str]:
    command = [sys.executable, "-m", "teleop.benchmarks.record_bench", "--child", mode,
               "--duration", str(duration_s), "--frames", str(frames_dir), "--channels", channels]
    if output is not None:
        command += ["--output", str(output)]
    return command + (["--announce"] if announce else [])


def _child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def _run_child(command: list[str]) -> dict:
    done = subprocess.run(command, capture_output=True, text=True, env=_child_env(), cwd=_REPO_ROOT, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark child failed ({done.returncode}): {done.stderr[-2000:]}")
    line = next(text for text in done.stdout.splitlines() if text.startswith("result "))
    return json.loads(line[len("result "):])


def measure_cpu(duration_s: float, frames_dir: Path, workdir: Path, channels: str = "core") -> dict:
    """(a): recorder CPU as a fraction of one core, from a recording and a baseline child."""
    baseline = _run_child(_child_command("baseline", duration_s, frames_dir, None, channels=channels))
    recording = _run_child(_child_command("record", duration_s, frames_dir, workdir / "cpu.mcap", channels=channels))
    wall = recording["wall_s"]
    return {
        "cpu_fraction_of_one_core": (recording["cpu_s"] - baseline["cpu_s"]) / wall,
        "writer_thread_fraction": recording["writer_cpu_s"] / wall,
        "record_cpu_s": recording["cpu_s"], "baseline_cpu_s": baseline["cpu_s"], "wall_s": wall,
        "messages_per_s": recording["messages"] / wall, "dropped": recording["dropped"],
        "megabytes_per_s": recording["bytes"] / wall / 1e6,
        "tick_lateness_p99_ms": recording["lateness_p99_ms"],
        "baseline_tick_lateness_p99_ms": baseline["lateness_p99_ms"],
        "ticks_late_over_2ms": recording["late_over_2ms"], "baseline_ticks_late_over_2ms": baseline["late_over_2ms"],
    }


def measure_kill_loss(run_s: float, frames_dir: Path, workdir: Path) -> dict:
    """(b): SIGKILL a recording child after ``run_s`` seconds; seconds of data lost."""
    from teleop.record import recover

    path = workdir / "killed.mcap"
    child = subprocess.Popen(_child_command("record", 3600.0, frames_dir, path, announce=True),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env(),
                             cwd=_REPO_ROOT)
    assert child.stdout is not None and child.stderr is not None   # both are pipes
    try:
        line = child.stdout.readline()
        if not line.startswith("recording "):
            raise RuntimeError(f"recording child did not start: {line!r} {child.stderr.read()[-2000:]}")
        first_ns = int(line.split()[1])
        time.sleep(max(0.0, run_s - (time.time_ns() - first_ns) * 1e-9))
        kill_ns = time.time_ns()
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:  # killed above (not yet reaped) or failed to start
            child.kill()
        child.wait()
        child.stdout.close()
        child.stderr.close()
    report = recover(path)
    return {"lost_on_kill_s": (kill_ns - report.last_ns) * 1e-9, "recorded_before_kill_s": (kill_ns - first_ns) * 1e-9,
            "recovered_messages": report.messages, "discarded_bytes": report.discarded_bytes}


def run(quick: bool = False, progress: bool = False) -> dict:
    """Both measurements. ``quick``: 3 s CPU runs and a kill after 2 s; else 8 s, and three
    kills 4 s, 4.17 s and 4.33 s in: a third of the 0.5 s flush interval apart, for the loss
    depends on where in it the kill falls (one kill at a fixed time measured one point of it).
    ``lost_on_kill_s`` is the largest loss, ``lost_on_kill_mean_s`` their mean.

    Without ``quick`` the CPU is also measured with every channel at once (adds delivered
    and compensated commands at 100 Hz and operator input at 60 Hz), reported as
    ``all_channels_cpu_fraction``. ``progress``: a line per stage on stderr.
    """
    from teleop.benchmarks.stages import Stages

    stage = Stages("bench record", 3 if quick else 4, progress)
    cpu_s, kill_s = (3.0, 2.0) if quick else (8.0, 4.0)
    with tempfile.TemporaryDirectory(prefix="record_bench_") as tmp:
        workdir = Path(tmp)
        frames_dir = workdir / "frames"
        frames_dir.mkdir()
        stage("encoding the camera frames")
        for i, jpeg in enumerate(make_textured_jpegs()):
            (frames_dir / f"{i:02d}.jpg").write_bytes(jpeg)
        jpeg_bytes = [p.stat().st_size for p in frames_dir.glob("*.jpg")]
        result: dict[str, Any] = {"jpeg_kilobytes": float(np.mean(jpeg_bytes)) / 1e3}
        stage(f"recorder CPU: a baseline and a recording process, {cpu_s:g} s each")
        result.update(measure_cpu(cpu_s, frames_dir, workdir))
        if not quick:
            stage("recorder CPU with every channel: two more processes, 8 s each")
            every = measure_cpu(8.0, frames_dir, workdir, channels="all")
            result["all_channels_cpu_fraction"] = every["cpu_fraction_of_one_core"]
            result["all_channels_messages_per_s"] = every["messages_per_s"]
        kills = [kill_s] if quick else [kill_s + k * 0.5 / 3 for k in range(3)]
        stage(f"data lost on SIGKILL: {len(kills)} recording process{'es' if len(kills) > 1 else ''} killed "
              f"after {', '.join(f'{t:.2f}' for t in kills)} s")
        losses = [measure_kill_loss(t, frames_dir, workdir) for t in kills]
        each = [float(loss["lost_on_kill_s"]) for loss in losses]
        # The details (recorded before, recovered, tail dropped) are the worst kill's, beside its loss.
        result.update(losses[int(np.argmax(each))])
        result.update(lost_on_kill_each_s=each, lost_on_kill_s=max(each), lost_on_kill_mean_s=float(np.mean(each)))
    stage.done()
    return result


def format_table(result: dict) -> str:
    """The figures as a text table, targets and pass/fail first."""
    def verdict(ok: bool) -> str:
        return "ok" if ok else "FAIL"

    cpu, lost = result["cpu_fraction_of_one_core"], result["lost_on_kill_s"]
    rows = [
        ("recorder CPU [fraction of one core]", f"{cpu:.3f}", f"<= {CPU_TARGET:.2f}", verdict(cpu <= CPU_TARGET)),
        (f"lost on SIGKILL, worst of {len(result.get('lost_on_kill_each_s', [lost]))} kills [s]", f"{lost:.3f}",
         f"<= {LOSS_TARGET_S:.1f}", verdict(lost <= LOSS_TARGET_S)),
        ("  each kill [s]", " / ".join(f"{x:.3f}" for x in result.get("lost_on_kill_each_s", [lost])), "",
         "(flushed every 0.5 s: up to that, by where the kill falls)"),
        ("  writer thread alone [fraction]", f"{result['writer_thread_fraction']:.3f}", "", ""),
        ("  process CPU, recording / baseline [s]",
         f"{result['record_cpu_s']:.2f} / {result['baseline_cpu_s']:.2f}", "", ""),
        ("  wall time of the loop [s]", f"{result['wall_s']:.2f}", "", ""),
        ("  messages written [1/s]", f"{result['messages_per_s']:.0f}", "", ""),
        ("  data written [MB/s]", f"{result['megabytes_per_s']:.2f}", "", ""),
        ("  mean JPEG size [kB]", f"{result['jpeg_kilobytes']:.0f}", "", ""),
        ("  messages dropped", f"{result['dropped']}", "", ""),
        ("  100 Hz tick lateness p99, recording / baseline [ms]",
         f"{result['tick_lateness_p99_ms']:.2f} / {result['baseline_tick_lateness_p99_ms']:.2f}", "", ""),
        ("  ticks late by > 2 ms, recording / baseline",
         f"{result['ticks_late_over_2ms']} / {result['baseline_ticks_late_over_2ms']}", "", ""),
        ("  worst kill: recorded before it [s]", f"{result['recorded_before_kill_s']:.2f}", "", ""),
        ("  worst kill: messages recovered after it", f"{result['recovered_messages']}", "", ""),
        ("  worst kill: damaged tail dropped [bytes]", f"{result['discarded_bytes']}", "", ""),
    ]
    if "all_channels_cpu_fraction" in result:
        every = result["all_channels_cpu_fraction"]
        rows.append(("every channel at once [fraction of one core]", f"{every:.3f}", f"<= {CPU_TARGET:.2f}",
                     f"{verdict(every <= CPU_TARGET)} ({result['all_channels_messages_per_s']:.0f} msg/s)"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"{'metric':<{widths[0]}}  {'value':>{widths[1]}}  {'target':<{widths[2]}}  "]
    lines += [f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:<{widths[2]}}  {d}" for a, b, c, d in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="record_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (3 s CPU, kill after 2 s)")
    args = parser.parse_args(argv)
    print(format_table(run(quick=args.quick, progress=True)))
    return 0


if __name__ == "__main__":
    argv = sys.argv[1:]
    sys.exit(_child_main(argv) if "--child" in argv else main(argv))
