"""The stations' loop timing: overruns shorter than a second, counted and reported.

A loop only said something once it fell a whole second behind; a 10 ms body that took
15-30 ms now and then (a slow QP, a camera render) delayed commands and video unseen. The
loop runs here on a fake clock (``run_loop(..., clock=, sleep=)``): the body advances time by
as much as it is told to take, so every figure is exact and no test depends on the speed
of the machine. One test runs the real station processes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import free_port
from teleop.stations.loop_timing import LoopTiming, run_loop

REPO_ROOT = Path(__file__).resolve().parents[1]
SECRET = "station-loop-timing-test-secret-0123456789"


class FakeTime:
    """A monotonic clock [s] that only the body (``spend``) and the loop's sleep advance."""

    def __init__(self) -> None:
        self.t = 1000.0

    def clock(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    def spend(self, seconds: float) -> None:
        self.t += seconds


def loop_on_fake_clock(body_ms, duration: float, period: float = 0.01,
                       station: str = "robot") -> tuple[LoopTiming, list[float]]:
    """Run :func:`run_loop` for ``duration`` fake seconds; the body of call ``k`` takes ``body_ms(k)`` ms.
    Returns the timing and each call's body duration [ms]."""
    fake, spent = FakeTime(), []

    def body():
        ms = body_ms(len(spent))
        spent.append(ms)
        fake.spend(ms / 1e3)

    timing = run_loop(period, duration, body, station, clock=fake.clock, sleep=fake.sleep)
    return timing, spent


def overload_warnings(err: str, station: str = "robot") -> list[str]:
    return [line for line in err.splitlines() if line.startswith(f"[{station}] warning:") and "were late" in line]


# ------------------------------------------------------------------ LoopTiming itself
def test_a_tick_is_late_when_it_starts_a_period_late_or_its_body_outlasts_the_period():
    timing = LoopTiming(0.01)
    timing.tick(started=0.000, scheduled=0.000, body_s=0.004)     # on time
    timing.tick(started=0.019, scheduled=0.010, body_s=0.004)     # 9 ms late: less than a period
    timing.tick(started=0.031, scheduled=0.020, body_s=0.004)     # 11 ms late
    timing.tick(started=0.030, scheduled=0.030, body_s=0.012)     # on time, but a 12 ms body
    timing.tick(started=0.0395, scheduled=0.040, body_s=0.001)    # early (sleep granularity): lateness 0
    assert (timing.ticks, timing.late) == (5, 2)
    assert timing.max_lateness_ms == pytest.approx(11.0)
    assert timing.max_body_ms == pytest.approx(12.0)
    assert timing.late_fraction == pytest.approx(0.4)
    assert timing.resyncs == 0
    timing.resynced()
    summary = timing.summary()
    assert summary["ticks"] == 5 and summary["late"] == 2 and summary["late_percent"] == pytest.approx(40.0)
    assert summary["resyncs"] == 1 and summary["period_ms"] == pytest.approx(10.0)
    assert summary["body_median_ms"] == pytest.approx(4.0, rel=0.01)
    assert summary["body_p99_ms"] == pytest.approx(12.0, rel=0.01) and summary["body_p99_ms"] <= summary["body_max_ms"]


def test_the_body_quantiles_come_from_a_fixed_size_histogram_within_one_percent():
    rng = np.random.default_rng(3)
    durations_ms = np.concatenate([rng.uniform(2, 9, 5000), rng.lognormal(3, 0.5, 120)])   # a tail of overruns
    timing = LoopTiming(0.01)
    memory = len(timing._histogram)
    for k, ms in enumerate(durations_ms):
        timing.tick(started=k * 0.01, scheduled=k * 0.01, body_s=ms / 1e3)
    assert len(timing._histogram) == memory                      # O(1): nothing grows with the ticks
    for q in (0.5, 0.9, 0.99, 0.999):
        exact = np.quantile(durations_ms, q, method="inverted_cdf")
        assert timing.body_quantile_ms(q) == pytest.approx(exact, rel=0.01), q
    assert timing.max_body_ms == pytest.approx(durations_ms.max())              # kept exactly
    assert timing.body_quantile_ms(1.0) <= timing.max_body_ms


def test_before_any_tick_the_figures_are_empty_not_made_up():
    timing = LoopTiming(0.01)
    assert timing.summary()["ticks"] == 0 and timing.summary()["body_p99_ms"] is None
    assert timing.short() == "loop: 0.0 % late, body p99 - ms, max 0.0 ms"
    json.dumps(timing.summary(), allow_nan=False)                # valid JSON: null, not NaN
    with pytest.raises(ValueError):
        LoopTiming(0.0)


def test_the_short_form_for_the_status_lines():
    timing = LoopTiming(0.01)
    for k in range(1000):
        timing.tick(started=k * 0.01, scheduled=k * 0.01, body_s=(0.031 if k == 500 else 0.004) + (k % 7) * 1e-4)
    text = timing.short()
    assert re.fullmatch(r"loop: 0\.1 % late, body p99 4\.\d ms, max 31 ms", text), text
    timing.resynced()
    assert timing.short().endswith(", max 31 ms, 1 resync")


# --------------------------------------------------------------- run_loop on a fake clock
def test_a_loop_that_keeps_its_period_has_no_late_tick_and_says_nothing(capsys):
    timing, spent = loop_on_fake_clock(lambda k: 4.0, duration=20.0)
    assert timing.ticks == len(spent) and abs(timing.ticks - 2000) <= 1
    assert timing.late == 0 and timing.resyncs == 0 and timing.max_lateness_ms < 1e-6
    assert timing.body_quantile_ms(0.99) == pytest.approx(4.0, rel=0.01)
    assert capsys.readouterr().err == ""


def test_overruns_shorter_than_a_second_are_counted_and_warned_about(capsys):
    """Every 10th body takes 15 ms at 100 Hz: each is late, and the schedule catches up on
    the next tick (started 5 ms late: not late). Never a second behind, so the old loop said
    nothing; now 10 % of the ticks are late, which warns once, then again 30 s later."""
    timing, spent = loop_on_fake_clock(lambda k: 15.0 if k % 10 == 0 else 4.0, duration=20.0)
    slow = sum(ms > 10 for ms in spent)
    assert timing.ticks == len(spent) and timing.late == slow and timing.late_fraction == pytest.approx(0.1, abs=0.001)
    assert timing.max_lateness_ms == pytest.approx(5.0)
    assert timing.max_body_ms == pytest.approx(15.0)
    assert timing.body_quantile_ms(0.5) == pytest.approx(4.0, rel=0.01)
    assert timing.body_quantile_ms(0.99) == pytest.approx(15.0, rel=0.01)
    assert timing.resyncs == 0
    err = capsys.readouterr().err
    warnings = overload_warnings(err)
    assert len(warnings) == 1 and len(err.splitlines()) == 1, err          # once, not once a tick
    assert re.search(r"\b10\.\d % of the 100 Hz loop's ticks in the last \d+ s were late "
                     r"\(body p99 15 ms, period 10 ms\)", warnings[0]), warnings[0]
    assert timing.short() == "loop: 10.0 % late, body p99 15 ms, max 15 ms"

    timing, _ = loop_on_fake_clock(lambda k: 15.0 if k % 10 == 0 else 4.0, duration=65.0)
    assert len(overload_warnings(capsys.readouterr().err)) == 3 == timing.warnings    # at ~4 s, ~34 s, ~64 s


def test_rare_overruns_and_a_slow_start_do_not_warn(capsys):
    # 1 tick in 25 late: 4 %, under the 5 % threshold.
    timing, _ = loop_on_fake_clock(lambda k: 15.0 if k % 25 == 0 else 4.0, duration=30.0)
    assert timing.late_fraction == pytest.approx(0.04, abs=0.001) and timing.warnings == 0
    # The first second (imports, first render) is slow: counted, but no overload.
    timing, _ = loop_on_fake_clock(lambda k: 15.0 if k < 50 else 4.0, duration=15.0)
    assert timing.late >= 50 and timing.warnings == 0
    assert capsys.readouterr().err == ""


def test_a_slow_second_after_the_warm_up_alone_does_not_warn(capsys):
    """The robot's first camera renders are slow past the 1 s warm-up: judged on second 1
    alone, every session warned "8.0 % ... in the last 1 s were late" 2 s in (2.5 % late over
    the run). A window is judged once it holds 3 s."""
    timing, _ = loop_on_fake_clock(lambda k: 15.0 if 100 <= k < 200 and k % 10 == 0 else 4.0, duration=15.0)
    assert timing.late == 10 and timing.warnings == 0
    assert capsys.readouterr().err == ""


def overload_body_ms(k: int) -> float:
    """After 100 s at ease (k < 10 000), every 5th body takes 15 ms, and every 100th 25 ms."""
    if k < 10_000 or k % 5:
        return 4.0
    return 25.0 if k % 100 == 0 else 15.0


def test_the_warning_names_the_p99_of_the_last_seconds_not_of_the_whole_run(capsys):
    """After 100 s at ease, every 5th body takes 15 ms, every 100th 25 ms: the run's p99 is
    still 4 ms, the last seconds' is 15 ms (the few 25 ms bodies are under 1 % of the
    window's ticks: its largest, not its p99), which is what the warning must say."""
    fake, timing, spent, starts, judged = FakeTime(), LoopTiming(0.01), [], [], []

    def body():
        starts.append(fake.clock())
        spent.append(overload_body_ms(len(spent)))
        fake.spend(spent[-1] / 1e3)

    tick = timing.tick

    def tick_noting_when_it_warns(started, scheduled, body_s):
        message = tick(started, scheduled, body_s)
        if message:
            judged.append(int((started - starts[0]) // 1.0))     # the second it was judged at
        return message

    timing.tick = tick_noting_when_it_warns
    run_loop(0.01, 103.5, body, "robot", timing, clock=fake.clock, sleep=fake.sleep)
    warnings = overload_warnings(capsys.readouterr().err)
    assert len(warnings) == 1 and "(body p99 15 ms, period 10 ms)" in warnings[0], warnings
    assert timing.body_quantile_ms(0.99) == pytest.approx(4.0, rel=0.01)
    assert timing.max_body_ms == pytest.approx(25.0)

    # The window judged (the 10 whole seconds before the warning), by hand: p99 15 ms, its
    # largest 25 ms; a window p99 read as the window's largest would say 25 ms.
    [second] = judged
    seconds = np.floor(np.subtract(starts, starts[0])).astype(int)
    window = np.asarray(spent)[(second - 10 <= seconds) & (seconds < second)]
    assert len(window) > 900 and window.max() == 25.0
    assert np.quantile(window, 0.99, method="inverted_cdf") == 15.0
    assert "25 ms" not in warnings[0]


def test_a_window_of_fewer_than_min_ticks_is_not_judged(capsys):
    """A 5 Hz loop stuck 1.25 periods behind (one 450 ms body, then bodies of exactly one
    period: it never catches up, nor falls a second behind): every tick is late, 5 a second.

    With the default 10 s window, the first window judged (at second 2: second 1 alone, the
    warm-up second 0 left out) holds 5 ticks, under the default min_ticks of 10; the next
    (second 3: 10 ticks) would warn, so the run stops before it. With a 1 s window every
    window holds 5 ticks: 20 s of late ticks and no warning, but one with min_ticks=5."""
    def late_loop(duration: float, timing: LoopTiming) -> LoopTiming:
        fake, calls = FakeTime(), [0]

        def body():
            fake.spend(0.45 if calls[0] == 0 else 0.2)
            calls[0] += 1

        return run_loop(0.2, duration, body, "robot", timing, clock=fake.clock, sleep=fake.sleep)

    timing = late_loop(2.9, LoopTiming(0.2))
    assert timing.ticks == 14 and timing.late == timing.ticks and timing.resyncs == 0
    assert timing.warnings == 0
    timing = late_loop(20.0, LoopTiming(0.2, window_s=1.0))
    assert timing.ticks == 99 and timing.late == timing.ticks and timing.resyncs == 0
    assert timing.warnings == 0
    assert capsys.readouterr().err == ""

    timing = late_loop(20.0, LoopTiming(0.2, window_s=1.0, min_ticks=5))
    assert timing.warnings == 1                                  # at second 2, then every 30 s
    [warning] = overload_warnings(capsys.readouterr().err)
    assert "100.0 % of the 5 Hz loop's ticks in the last 1 s were late (body p99 200 ms, period 200 ms)" \
        in warning, warning


def test_a_loop_a_second_behind_still_warns_and_resyncs_and_counts_it(capsys):
    timing, spent = loop_on_fake_clock(lambda k: 1500.0 if k == 300 else 4.0, duration=6.0)
    assert timing.resyncs == 1
    assert timing.max_body_ms == pytest.approx(1500.0)
    # The tick after the resync starts on its new schedule: only the long one is late.
    assert timing.late == 1 and timing.max_lateness_ms < 1e-6
    err = capsys.readouterr().err
    assert ("[robot] warning: the 100 Hz loop fell 1.5 s behind (the machine is overloaded?): "
            "carrying on from now" in err)
    assert timing.short().endswith(", 1 resync")


def test_the_timing_passed_in_survives_an_interrupted_loop():
    """Ctrl-C (KeyboardInterrupt) ends the stations' loop: their final statistics read the
    LoopTiming they passed in."""
    fake, timing, calls = FakeTime(), LoopTiming(0.02), [0]

    def body():
        calls[0] += 1
        if calls[0] == 6:
            raise KeyboardInterrupt
        fake.spend(0.005)

    with pytest.raises(KeyboardInterrupt):
        run_loop(0.02, None, body, "operator", timing, clock=fake.clock, sleep=fake.sleep)
    assert timing.ticks == 5 and timing.late == 0


# ------------------------------------------------------------------ the real stations
def _check_loop_object(loop: dict, period_ms: float) -> None:
    assert loop["period_ms"] == pytest.approx(period_ms)
    assert loop["ticks"] > 0 and 0 <= loop["late"] <= loop["ticks"]
    assert loop["late_percent"] == pytest.approx(100 * loop["late"] / loop["ticks"], abs=1e-3)
    assert 0 < loop["body_median_ms"] <= loop["body_p99_ms"] <= loop["body_max_ms"]
    assert loop["max_lateness_ms"] >= 0
    # Counts (how many is the machine's business): whole numbers, not floats of a sum or NaN.
    assert all(type(loop[key]) is int and loop[key] >= 0 for key in ("ticks", "late", "resyncs", "overload_warnings"))


def strict_json(text: str):
    """``json.loads`` that, like jq or a browser, refuses NaN and Infinity."""
    def refuse(constant):
        raise ValueError(f"not standard JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_both_stations_report_their_loop_in_the_json_and_the_status_lines(tmp_path):
    """Real processes, each alone (the loop runs without a peer): the robot with its status
    line (every 2 s), the operator; both with ``--json``. Only consistency is checked: the
    figures themselves depend on the machine."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TELEOP_SECRET=SECRET)
    python = [sys.executable, "-m", "teleop"]
    robot = subprocess.Popen(python + ["robot", "--listen", f"127.0.0.1:{free_port()}", "--video-to",
                                       f"127.0.0.1:{free_port()}", "--video-hz", "0", "--duration", "3", "--json"],
                             env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    operator = subprocess.Popen(python + ["operator", "--robot", f"127.0.0.1:{free_port()}", "--video-listen",
                                          f"127.0.0.1:{free_port()}", "--duration", "1", "--json"],
                                env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        (robot_out, robot_err), (op_out, op_err) = (child.communicate(timeout=300) for child in (robot, operator))
    finally:
        for child in (robot, operator):
            if child.poll() is None:
                child.kill()
                child.wait()
    # The operator's robot is not there: exit code 1, said (its JSON is printed all the same).
    assert robot.returncode == 0 and operator.returncode == 1, (robot_err[-2000:], op_err[-2000:])
    assert "never answered" in op_err

    telemetry = strict_json(robot_out.strip().splitlines()[-1])
    assert {"controller_timing_ms", "tau_f_mean_s", "tau_b_s", "compensation", "network"} <= telemetry.keys()
    # Alone, nothing measured either delay: null (it printed a bare NaN, which JSON parsers
    # reject) and the assumed τ_b said to be one.
    assert telemetry["tau_f_mean_s"] is None and telemetry["tau_b_measured"] is False
    _check_loop_object(telemetry["loop"], 10.0)
    status = [line for line in robot_err.splitlines() if line.startswith("[robot] ") and " qp p50 " in line]
    assert status and all(re.search(r"  loop: \d+\.\d % late, body p99 [\d.]+ ms, max [\d.]+ ms", line)
                          for line in status), robot_err[-2000:]
    # (--video-hz 0: no report will come, and the line says so.)
    assert all("tau_f n/a tau_b 0.000 s (assumed: no video, --video-hz 0)" in line for line in status), status

    stats = strict_json(op_out.strip().splitlines()[-1])
    assert {"references_sent", "feedback_received", "video_frames_displayed", "video", "network"} <= stats.keys()
    assert stats["image_age_s"] is None      # no robot answered: no clock offset, no age made up
    _check_loop_object(stats["loop"], 10.0)
    # The 100 Hz synthetic operator at the 100 Hz loop: about one reference a tick (a tick
    # after a late one sends the frames due since, at most 4).
    assert 0.5 * stats["loop"]["ticks"] <= stats["references_sent"] <= 4 * stats["loop"]["ticks"]


def test_the_operator_final_line_gives_the_loop_in_short(monkeypatch, capsys):
    from teleop.cli import main

    monkeypatch.setenv("TELEOP_SECRET", SECRET)
    assert main(["operator", "--robot", f"127.0.0.1:{free_port()}", "--video-listen",
                 f"127.0.0.1:{free_port()}", "--duration", "0.5"]) == 1     # no robot there
    out = capsys.readouterr().out
    assert out.startswith("sent ")
    assert re.search(r", loop: \d+\.\d % late, body p99 [\d.]+ ms, max [\d.]+ ms$", out.strip()), out


def test_falling_a_second_behind_is_said_at_most_every_30_s(capsys):
    """On a loaded machine the warning came every 2 s (6 times in 14 s); the resyncs are all
    counted, the warning is repeated at most every 30 s like the overload warning."""
    fake, calls = FakeTime(), [0]

    def body():
        fake.spend(1.5 if calls[0] % 2 == 0 else 0.0)    # every other tick: 1.5 s late
        calls[0] += 1

    timing = run_loop(0.1, 40.0, body, "robot", LoopTiming(0.1), clock=fake.clock, sleep=fake.sleep)
    said = [line for line in capsys.readouterr().err.splitlines() if "fell" in line]
    assert timing.resyncs >= 20 and len(said) == 2          # at 1.5 s and ~31.5 s
    assert "(the status lines count the resyncs)" in said[0]
