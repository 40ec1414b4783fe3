"""The demo's "what the operator sees" error (teleop.demo.seen_error_cm) on a made-up log."""

from __future__ import annotations

import numpy as np
import pytest

from teleop.demo import SessionLog, seen_error_cm


def _log(offset_when_predicting: float) -> tuple[SessionLog, np.ndarray]:
    """A 4 s log at 100 Hz: the operator's hands move along x; the robot's measured hands
    are exactly the operator's, shown τ_b = 0.5 s later, except on the "predicting" ticks
    (1-2 s) where they are off by ``offset_when_predicting`` [m] on every axis."""
    log = SessionLog()
    t = np.arange(0.0, 4.0, 0.01)
    predicting = (t >= 1.0) & (t < 2.0)
    for k, tk in enumerate(t):
        operator = np.zeros(20)
        operator[3:9] = 0.1 * np.sin(tk)          # both hands, every axis [m]
        seen_truth = 0.1 * np.sin(tk + 0.5)         # where the operator is when this is seen
        hands = np.full((2, 3), seen_truth) + (offset_when_predicting if predicting[k] else 0.0)
        log.times.append(tk)
        log.operator.append(operator)
        log.hands.append(hands)
    return log, predicting


def _expected_masks(log: SessionLog, tau_b: float) -> tuple[np.ndarray, np.ndarray]:
    """Written out from the log's construction, not from the code under test: the ticks
    whose seen time is inside the log, and the ticks where the operator's hands move faster
    than 5 cm/s (speed of the six coordinates 0.1 sin t: sqrt(6) 0.1 |cos t|)."""
    t = np.asarray(log.times)
    kept = t + tau_b <= t[-1]
    moving = np.sqrt(6.0) * 0.1 * np.abs(np.cos(t)) > 0.05
    # No tick lies near the 5 cm/s threshold (|cos t| = 0.204 at t = 1.365 and 1.777 s):
    # the nearest is 0.9 mm/s off it, while np.gradient's central difference is off the
    # analytic speed by at most 0.245 dt^2 / 6 ~ 4e-6 m/s, so it cannot cross it.
    assert np.min(np.abs(np.sqrt(6.0) * 0.1 * np.abs(np.cos(t)) - 0.05)) > 1e-4
    return kept, moving


def test_predicting_error_counts_only_the_predicting_ticks():
    log, predicting = _log(0.02)
    seen = seen_error_cm(log, tau_b=0.5, predicting=predicting)
    assert seen["predicting_cm"] == pytest.approx(2.0, abs=1e-9)        # 2 cm on every axis
    # The error is 2 cm on the predicting ticks and 0 elsewhere (the measured hands are the
    # operator's, sampled exactly τ_b later): a per-axis RMS over n ticks of which m are
    # predicting is 2 sqrt(m / n) cm, over the ticks seen within the log only.
    kept, moving = _expected_masks(log, 0.5)
    assert kept.sum() < len(kept) and (predicting & ~kept).sum() == 0
    assert seen["all_cm"] == pytest.approx(2.0 * np.sqrt(predicting[kept].sum() / kept.sum()), rel=1e-9)
    rows = kept & moving
    assert 0 < (rows & predicting).sum() < predicting.sum()              # the window holds still ticks too
    assert seen["moving_cm"] == pytest.approx(2.0 * np.sqrt((rows & predicting).sum() / rows.sum()), rel=1e-9)
    assert "predicting_cm" not in seen_error_cm(log, tau_b=0.5)


def test_no_predicting_ticks_give_none():
    log, predicting = _log(0.0)
    assert seen_error_cm(log, tau_b=0.5, predicting=np.zeros_like(predicting))["predicting_cm"] is None
    exact = seen_error_cm(log, tau_b=0.5, predicting=predicting)
    # Measured hands are exactly the operator's τ_b later: every figure is 0 (to rounding;
    # a one-tick misalignment would give ~0.07 cm, a wrong τ_b centimetres).
    for key in ("predicting_cm", "all_cm", "moving_cm"):
        assert exact[key] == pytest.approx(0.0, abs=1e-9), key


def test_an_interrupted_demo_leaves_no_empty_output_folder(tmp_path, monkeypatch):
    """The frames folder was made before the sessions ran: Ctrl-C left it there, empty."""
    import teleop.demo as demo

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "run_session", interrupted)
    with pytest.raises(KeyboardInterrupt):
        demo.run_demo(tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def _still_session(settings, library, *, with_video, progress, fell=False):
    """A session whose operator never moves (a demo shorter than its first motion)."""
    log = SessionLog()
    t = np.arange(100) * 0.01
    log.times = list(t)
    log.operator = [np.zeros(20) for _ in t]
    log.hands = [np.zeros((2, 3)) for _ in t]
    log.cop = [np.zeros(2) for _ in t]
    log.states = ["passthrough"] * len(t)
    log.frames = [(x + settings.rtt, x, b"jpeg") for x in t[::20]] if with_video else []
    log.fell = fell
    return log


@pytest.mark.parametrize("fell", [False, True])
def test_a_short_demo_ends_with_its_summary_and_a_fall_with_exit_code_1(tmp_path, monkeypatch, capsys, fell):
    """`teleop demo --duration 3`: no tick where the operator moved, and the plot's headline
    formatted None (a TypeError traceback). A fall (another actuator model) ended with exit
    code 0."""
    import teleop.demo as demo
    from teleop.cli import main

    class Library:
        labels = ["reach"]

    monkeypatch.setattr(demo, "train_library", lambda dataset: (Library(), 1))
    monkeypatch.setattr(demo, "run_session", lambda *a, **k: _still_session(*a, **k, fell=fell))
    assert main(["demo", "--duration", "1", "--out", str(tmp_path / "out")]) == (1 if fell else 0)
    captured = capsys.readouterr()
    assert "none measured" in captured.out and (tmp_path / "out" / "demo.png").stat().st_size > 0
    assert ("teleop demo: error: the robot fell" in captured.err) == fell


def test_the_frames_kept_are_spread_over_the_operators_motion():
    """The demo kept the session's last six frames: the robot at rest after the session, its
    eye on the horizon. It keeps six spread over the frames captured while the hands moved."""
    from teleop.demo import frames_in_motion

    log = SessionLog()
    t = np.arange(1000) * 0.01                      # 10 s; the right hand moves from 4 s to 6 s
    log.times = list(t)
    x = np.clip(t - 4.0, 0.0, 2.0) * 0.2            # 0.2 m/s while moving
    log.operator = [np.r_[np.zeros(6), xi, 0.0, 0.0, np.zeros(11)] for xi in x]
    log.frames = [(c + 0.75, c, f"frame at {c:.1f}".encode()) for c in t[::20]]   # 5 Hz
    kept = frames_in_motion(log)
    captured = [c for _, c, _ in kept]
    assert len(kept) == 6 and all(4.0 <= c <= 6.0 for c in captured)
    assert captured == sorted(captured) and captured[0] <= 4.3 and captured[-1] >= 5.7
    log.operator = [np.zeros(20) for _ in t]        # no motion at all: spread over the whole session
    captured = [c for _, c, _ in frames_in_motion(log)]
    assert captured[0] == 0.0 and captured[-1] == pytest.approx(9.8)


DESCRIPTION_MODEL = "on (the robot description's [sim.actuator])"


@pytest.mark.parametrize("env, on, said", [("", False, "off"), ("on", True, DESCRIPTION_MODEL),
                                           ("", True, DESCRIPTION_MODEL),
                                           ("fit/params.toml", True, "on (fit/params.toml)")])
def test_the_summary_says_whose_actuator_model_ran(monkeypatch, env, on, said):
    """TELEOP_SIM_ACTUATOR=on was said as "on (on)"."""
    from teleop.demo import _actuator_label

    monkeypatch.setenv("TELEOP_SIM_ACTUATOR", env)
    assert _actuator_label(on) == said
