"""The headline figures against their definitions in the reference, on hand-computable inputs.

Reference: /work/shared/reference/penco_whole_body_teleoperation.md (the thesis's §5.4):
§6.3 metrics (RMS in cm / rad, mean ± SD over the test motions; the compensated trajectory
realigned with the undelayed one and counted only after the blend-in has ended), §6.4
(Table 5.2: prediction error with no observation, after recognition, after 1/4 and 1/2 of
the motion), §6.5 (Table 5.3: compensation vs none), §6.6 (Fig. 5.18, with and without the
synchronisation transition), §5.7 (the delay model: τ_f ~ N(τ_D, (2/15) τ_D), τ_b = τ_D).

``teleop trial``: :mod:`teleop.trials.delay_trial` (per-take scoring) and
:mod:`teleop.trials.sweep` (over the takes). ``teleop eval promp``:
:func:`promp.evaluation.evaluate_library` (per motion) and :func:`teleop.train_cli.evaluate`
(the figures printed: hands per axis, averaged over axes and hands, in cm).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from retarget.references import FLAT_SIZE, HAND_INDICES, ReferenceTrajectory
from teleop.prescient.compensator import CompensationState, CompensatorOutput
from teleop.trials import delay_trial
from teleop.trials.delay_trial import TakeResult, TrialSettings, error_summary, run_take, score_pair
from teleop.trials.sweep import summarise

#: The first protocol: no rest added before or after the take (delay_trial.pad_take), no
#: jitter: every command arrives exactly one forward delay after it was sent.
PLAIN = TrialSettings(jitter_ratio=0.0, lead_in=0.0, hold=0.0)
L_HAND_X, R_HAND_X = HAND_INDICES[0], HAND_INDICES[3]


def _take(times: np.ndarray, column: int, values: np.ndarray, label: str = "squat") -> ReferenceTrajectory:
    """A take that moves one signal (``column`` of the 20 references) and holds the others at 0."""
    flat = np.zeros((len(times), FLAT_SIZE))
    flat[:, column] = values
    return ReferenceTrajectory(times, flat, label=label)


# --------------------------------------------------------------------- trial: error_summary


def test_a_constant_1_cm_on_one_axis_of_one_hand_is_one_sixth_of_a_cm():
    """Per-axis RMS averaged over the 3 axes of the 2 hands (§6.3; the issue's "per-axis RMS
    averaged over axes and hands"): 1 cm on one of 6 axes is 1/6 cm; CoM over x, y (the
    waist height is not scored); postures over the 11 joint signals [rad]."""
    err = np.zeros((50, FLAT_SIZE))
    err[:, L_HAND_X] = 0.01          # 1 cm
    err[:, 0] = 0.02                 # CoM x 2 cm
    err[:, 2] = 0.5                  # waist z: not a CoM axis
    err[:, 9] = 0.11                 # one posture signal, 0.11 rad
    summary = error_summary(err)
    assert summary["hand_cm"] == pytest.approx(1.0 / 6.0)
    assert summary["com_cm"] == pytest.approx(1.0)
    assert summary["posture_rad"] == pytest.approx(0.01)


def test_the_hand_error_is_per_axis_not_the_euclidean_distance():
    """1 cm on each axis of the right hand: each axis RMS is 1 cm, the mean over the six
    axes 0.5 cm (the distance, sqrt(3) cm, is Figs. 5.17/5.18's measure, not Table 5.3's);
    a sine of amplitude 3 cm over whole periods has an RMS of 3/sqrt(2) cm."""
    err = np.zeros((100, FLAT_SIZE))
    err[:, R_HAND_X:R_HAND_X + 3] = 0.01
    assert error_summary(err)["hand_cm"] == pytest.approx(0.5)
    err = np.zeros((100, FLAT_SIZE))
    err[:, L_HAND_X] = 0.03 * np.sin(2 * np.pi * np.arange(100) / 50)
    assert error_summary(err)["hand_cm"] == pytest.approx(3.0 / np.sqrt(2.0) / 6.0)


# --------------------------------------------------------------- trial: the realignment


def test_a_pure_delay_of_a_sine_realigned_by_the_backward_delay_leaves_no_error():
    """No compensation, no jitter: the robot executes G(s - τ_f) and the operator sees it
    τ_b later, when doing G(s + τ_b). A sine whose period is the round trip τ_f + τ_b looks
    undelayed once realigned: the error is only the control tick's hold (≤ 2π A dt / T).
    Scored against the unrealigned G(s) instead, the same run is off by 2A sin(...), an RMS
    of sqrt(2) A on that axis: the realignment is what makes the error zero."""
    rtt, amplitude = 1.0, 0.01
    times = np.arange(0.0, 4.0 + 1e-9, 0.01)
    take = _take(times, L_HAND_X, amplitude * np.sin(2 * np.pi * times / rtt))
    result = run_take(take, rtt, None, compensate=False, settings=PLAIN)
    np.testing.assert_allclose(result.truth, take.interpolate(result.times + rtt / 2.0))
    # From the first command's arrival (one forward delay) on.
    scored = result.errors_after(rtt / 2.0 + 0.011)
    bound_cm = 100 * 2 * np.pi * amplitude * 0.01 / rtt / 6.0      # one tick's hold, over 6 axes
    assert scored["hand_cm"] <= bound_cm
    mask = result.valid_mask(rtt / 2.0 + 0.011)
    unaligned = error_summary((result.executed - take.interpolate(result.times))[mask])
    assert unaligned["hand_cm"] == pytest.approx(100 * np.sqrt(2.0) * amplitude / 6.0, rel=0.02)


def test_without_compensation_a_ramp_is_off_by_its_motion_over_a_round_trip():
    """The module's reading of the uncompensated error, E(s) = G(s - τ_f) against
    G(s + τ_b): a ramp of 2 cm/s at 1 s round trip is off by 2 cm on that axis (plus at most
    one control tick's 0.02 cm), i.e. 2/6 cm per axis averaged over the hands."""
    rtt, speed = 1.0, 0.02
    times = np.arange(0.0, 4.0 + 1e-9, 0.01)
    result = run_take(_take(times, R_HAND_X, speed * times), rtt, None, compensate=False, settings=PLAIN)
    scored = result.errors_after(rtt / 2.0 + 0.011)
    assert 100 * speed * rtt / 6.0 - 1e-9 <= scored["hand_cm"] <= 100 * speed * (rtt + 0.01) / 6.0 + 1e-9


def test_the_operator_is_scored_until_the_end_of_the_take_realigned():
    """A tick counts while its truth G(s + τ_b) is inside the take (s ≤ duration - τ_b) and
    something was executed; a NaN tick is not scored."""
    times = np.arange(0.0, 5.0, 0.01)
    executed = np.zeros((len(times), FLAT_SIZE))
    executed[:10] = np.nan
    result = TakeResult(1.0, False, None, times=times, executed=executed, truth=np.zeros_like(executed),
                        take_duration=5.0)
    mask = result.valid_mask(0.0)
    assert not mask[:10].any()
    assert mask[10:].sum() == np.sum(times[10:] <= 4.5)


# ------------------------------------------------------- trial: the window after engagement


class _ScriptedCompensator:
    """Stands in for PrescientCompensator in run_take: passes through until 2.0 s, blends in
    until 2.5 s, then predicts; it outputs the operator's own future G(t + τ_b) (a perfect
    predictor) plus a known offset on the left hand's x per state: 3 cm, 5 cm, 1 cm."""

    tau_b_seen: list[float] = []

    def __init__(self, take: ReferenceTrajectory):
        self.take = take
        self.observed_count = 0

    def observe(self, t_op, flat, arrival=None, *, valid=None) -> None:
        self.observed_count += 1

    def step(self, t: float, tau_b: float) -> CompensatorOutput:
        type(self).tau_b_seen.append(tau_b)
        refs = self.take.interpolate(np.array([t + tau_b + self.take.times[0]]))[0].copy()
        if t < 1.995:
            state, offset = CompensationState.PASSTHROUGH, 0.03
        elif t < 2.495:
            state, offset = CompensationState.BLEND_IN, 0.05
        else:
            state, offset = CompensationState.PREDICTING, 0.01
        refs[L_HAND_X] += offset
        return CompensatorOutput(refs, state, task="squat" if state is not CompensationState.PASSTHROUGH else None)


def test_the_window_starts_when_the_blend_in_has_ended_and_the_delay_model_is_the_theses(monkeypatch):
    """§6.3: counted only after prediction starts and the blend-in has ended (engaged_at =
    the first PREDICTING tick, not the blend-in's start); the whole take counts every tick.
    §5.7 (Eqs. 5.16-5.18) as the trial plays it: τ_f ~ N(RTT/2, (2/15) RTT/2), τ_b = RTT/2
    constant, and the compensator is given τ̂_b = RTT/2 (RTT 1.5 s: N(0.75, 0.1) s)."""
    rtt = 1.5
    times = np.arange(0.0, 6.0 + 1e-9, 0.01)
    take = _take(times, R_HAND_X, 0.05 * np.sin(times))
    links = []
    real_connect = delay_trial.connect_virtual

    def connect(codec, link, clock, seed=None):
        links.append(link)
        return real_connect(codec, link, clock, seed=seed)

    monkeypatch.setattr(delay_trial, "connect_virtual", connect)
    monkeypatch.setattr(delay_trial, "PrescientCompensator", lambda library, config: _ScriptedCompensator(take))
    _ScriptedCompensator.tau_b_seen = []
    result = run_take(take, rtt, None, settings=TrialSettings(lead_in=0.0, hold=0.0))

    (link,) = links
    assert link.forward.delay == pytest.approx(0.75) and link.forward.sigma == pytest.approx(0.1)
    assert link.backward.delay == pytest.approx(0.75) and link.backward.sigma == 0.0
    assert _ScriptedCompensator.tau_b_seen and all(tb == pytest.approx(0.75) for tb in _ScriptedCompensator.tau_b_seen)
    assert result.engaged_at == pytest.approx(2.5, abs=0.006)
    assert result.engaged_task == "squat"
    assert result.window["hand_cm"] == pytest.approx(1.0 / 6.0)
    # Whole take: 3 cm for 2.0 s, 5 cm for 0.5 s, 1 cm until duration - τ_b = 5.25 s.
    n3, n5, n1 = 200, 50, int(round((5.25 - 2.5) / 0.01)) + 1
    whole = np.sqrt((n3 * 9 + n5 * 25 + n1 * 1) / (n3 + n5 + n1)) / 6.0
    assert result.whole["hand_cm"] == pytest.approx(whole, rel=0.01)


def test_the_uncompensated_run_is_scored_over_the_compensated_runs_window():
    """Table 5.3's "no comp" column: the same take, delayed only, over the same ticks."""
    times = np.arange(0.0, 5.0, 0.01)
    truth = np.zeros((len(times), FLAT_SIZE))
    comp_exec, nocomp_exec = truth.copy(), truth.copy()
    comp_exec[:, L_HAND_X] = np.where(times < 2.0, 0.05, 0.01)
    nocomp_exec[:, L_HAND_X] = np.where(times < 2.0, 0.0, 0.03)    # 0 before the window: left out
    comp = TakeResult(1.0, True, 2.0, times=times, executed=comp_exec, truth=truth, take_duration=5.0)
    nocomp = TakeResult(1.0, False, None, times=times, executed=nocomp_exec, truth=truth, take_duration=5.0)
    comp.window = comp.errors_after(comp.engaged_at)
    score_pair(comp, nocomp)
    assert comp.window["hand_cm"] == pytest.approx(1.0 / 6.0)
    assert nocomp.window["hand_cm"] == pytest.approx(3.0 / 6.0)
    assert np.isnan(TakeResult(1.0, False, None, times=times, executed=nocomp_exec, truth=truth,
                               take_duration=5.0).errors_after(None)["hand_cm"])


def test_the_whole_take_counts_the_robot_at_rest_before_the_first_command_arrives():
    """Fig. 5.18 "including the transition": from the take's start the operator sees the
    robot, at their rest pose until the first command arrives one forward delay in. Here
    the rest (0.2 s) is shorter than τ_f (1 s at 2 s round trip): the operator's ramp
    (2 cm/s) from 0.2 s on is seen against the robot at rest for the first second,
    G(s + 1) - G(0) = 2 cm/s (s + 0.8), then against the delayed ramp, off by 2 cm/s x 2 s
    = 4 cm once both move (s ≥ 1.2). Before, the first second's ticks were not scored."""
    rtt, speed = 2.0, 0.02
    times = np.arange(0.0, 5.0 + 1e-9, 0.01)
    take = _take(times, L_HAND_X, speed * np.clip(times - 0.2, 0.0, None))
    result = run_take(take, rtt, None, compensate=False, settings=PLAIN)
    np.testing.assert_array_equal(result.executed[0], take.values[0])
    s = result.times[result.valid_mask(0.0)]
    assert s[0] == 0.0 and s[-1] == pytest.approx(4.0, abs=0.011)
    seen = speed * np.clip(s - 1.0 - 0.2, 0.0, None)            # the delayed ramp (at rest until 1.2 s)
    seen[s < 1.0] = 0.0                                          # nothing arrived yet: the rest pose
    expected = 100 * np.sqrt(np.mean((seen - speed * (s + 1.0 - 0.2)) ** 2)) / 6.0
    assert result.whole["hand_cm"] == pytest.approx(expected, rel=0.01)


# ------------------------------------------------------------------ trial: over the takes


def _scored(rtt: float, comp: bool, engaged_at: float | None, window: float, whole: float) -> TakeResult:
    r = TakeResult(rtt, comp, engaged_at, window={"hand_cm": window, "com_cm": window, "posture_rad": window},
                   whole={"hand_cm": whole, "com_cm": whole, "posture_rad": whole}, label="squat",
                   engaged_task="squat" if comp and engaged_at is not None else None)
    r.worst_excess_cm = 0.0
    return r


def test_the_sweep_reports_mean_and_sd_over_the_engaged_takes_and_the_whole_over_all():
    """§6.3: mean ± SD over the test motions, of the takes scored in the window; a take
    engaged after the motion ended (empty window, NaN) is out of the window means but in the
    whole-take mean; the time until engagement is the mean over the engaged takes."""
    nan = float("nan")
    pairs = [(_scored(1.5, True, 2.0, 1.0, 2.0), _scored(1.5, False, None, 4.0, 5.0)),
             (_scored(1.5, True, 3.0, 3.0, 4.0), _scored(1.5, False, None, 6.0, 7.0)),
             (_scored(1.5, True, 9.0, nan, 6.0), _scored(1.5, False, None, nan, 9.0))]
    entry = summarise({1.5: pairs}, ["1.5"])["rtt"]["1.5"]
    assert entry["comp"]["hand_cm"] == pytest.approx(2.0) and entry["comp"]["hand_cm_std"] == pytest.approx(1.0)
    assert entry["nocomp"]["hand_cm"] == pytest.approx(5.0) and entry["nocomp"]["hand_cm_std"] == pytest.approx(1.0)
    assert entry["comp"]["whole"]["hand_cm"] == pytest.approx(4.0)
    assert entry["nocomp"]["whole"]["hand_cm"] == pytest.approx(7.0)
    assert entry["scored_takes"] == 2 and entry["engaged_late_takes"] == 1 and entry["takes"] == 3
    assert entry["engage_after_s"] == pytest.approx(14.0 / 3.0)


# ------------------------------------------------------------------ eval: evaluate_library


@pytest.fixture(scope="module")
def library():
    from promp.basis import RBFBasis
    from promp.synthetic import learn_library, make_tasks

    tasks = make_tasks(seed=4, n_tasks=2, n_signals=4, duration=2.5)
    return learn_library(tasks, np.random.default_rng(0), 7, basis=RBFBasis(12))


def _prior_motion(library, n: int = 251):
    """(times from 0 to the first task's mean duration, its prior mean there): what the
    "none" level predicts for a motion of that task (speed 1)."""
    promp = library.promps[0]
    t = np.linspace(0.0, promp.duration, n)
    return promp, t, promp.mean(promp.phase(t))


def test_no_observation_predicts_the_true_tasks_mean_and_the_error_is_per_signal_rms(library):
    """Table 5.2 "no obs": the hand-picked (true) task's mean, no conditioning. A motion that
    is that mean plus 1 cm on signal 0 is off by exactly 1 cm on signal 0 and 0 elsewhere,
    over the whole motion and over every level's unobserved part."""
    from promp.evaluation import LEVELS, evaluate_library
    from promp.learning import Demonstration

    promp, t, mean = _prior_motion(library)
    y = mean.copy()
    y[:, 0] += 0.01
    res = evaluate_library(library, [Demonstration(t + 7.0, y)], [library.labels[0]])   # any time origin
    np.testing.assert_allclose(res["rms_remaining"]["none"]["per_signal_mean"], [0.01, 0, 0, 0], atol=1e-12)
    np.testing.assert_allclose(res["rms_whole"]["none"]["per_signal_mean"], [0.01, 0, 0, 0], atol=1e-12)
    for level in LEVELS:
        np.testing.assert_allclose(res["rms_remaining_prior"][level]["per_signal_mean"], [0.01, 0, 0, 0],
                                   atol=1e-12)


def test_each_level_scores_only_the_part_not_yet_observed(library):
    """Table 5.2's columns observe nothing, the first 1 s ("recog", about 1 s in the thesis),
    a quarter and a half of the motion; each is scored on the samples after its cut. With
    1 cm on signal 0 during the first half only, the (unconditioned) error on each level's
    remainder is 1 cm x sqrt(offset samples left / samples left): 0 at one half."""
    from promp.evaluation import evaluate_library
    from promp.learning import Demonstration

    promp, t, mean = _prior_motion(library)
    duration = t[-1]
    first_half = t <= duration / 2
    y = mean.copy()
    y[first_half, 0] += 0.01
    res = evaluate_library(library, [Demonstration(t, y)], [library.labels[0]], recog_time=1.0)
    for level, cut in (("none", -np.inf), ("recog", 1.0), ("1/4", duration / 4), ("1/2", duration / 2)):
        left = t > cut
        expected = 0.01 * np.sqrt(np.sum(first_half & left) / np.sum(left))
        assert res["rms_remaining_prior"][level]["per_signal_mean"][0] == pytest.approx(expected, abs=1e-12), level
    assert res["rms_remaining_prior"]["1/2"]["per_signal_mean"][0] == pytest.approx(0.0, abs=1e-12)


def test_the_2_sigma_coverage_is_the_share_of_true_samples_inside_the_band(library):
    """Calibration: a sample counts inside when |true - predicted| ≤ 2 predictive σ (the
    observation noise included). Signal 1 at the mean + 3σ during the first half, + 1σ
    after: its coverage with no observation is the second half's share of the samples."""
    from promp.evaluation import evaluate_library
    from promp.learning import Demonstration

    promp, t, mean = _prior_motion(library)
    sigma = np.sqrt(promp.var(promp.phase(t), include_noise=True))
    first_half = t <= t[-1] / 2
    y = mean.copy()
    y[:, 1] += np.where(first_half, 3.0, 1.0) * sigma[:, 1]
    cov = evaluate_library(library, [Demonstration(t, y)], [library.labels[0]])["coverage_2sigma"]["none"]
    assert cov["per_signal"][1] == pytest.approx(np.mean(~first_half))
    assert cov["per_signal"][0] == 1.0 and cov["per_signal"][2] == 1.0 and cov["per_signal"][3] == 1.0
    assert cov["samples"] == 4 * len(t)
    assert cov["overall"] == pytest.approx((3 * len(t) + np.sum(~first_half)) / (4 * len(t)))


# ------------------------------------------------------------ eval: the figures printed


def _fake_result(n_test: int, hand_x: float, posture: float, accuracy: float, coverage: float,
                 samples: int) -> dict:
    """An evaluate_library result whose per-signal RMS is ``hand_x`` [m] on the left hand's
    x and ``posture`` [rad] on the first posture signal, at every level."""
    per_signal = np.zeros(FLAT_SIZE)
    per_signal[L_HAND_X] = hand_x
    per_signal[9] = posture
    rms = {lv: {"per_signal_mean": per_signal.tolist()} for lv in ("none", "recog", "1/4", "1/2")}
    return {"n_test": n_test, "recognition_accuracy": {lv: accuracy for lv in ("none", "recog", "1/4", "1/2")},
            "rms_remaining": rms, "rms_whole": rms, "rms_remaining_prior": rms,
            "coverage_2sigma": {"1/2": {"overall": coverage, "samples": samples}},
            "recognised": {lv: ["a"] * n_test for lv in ("none", "recog", "1/4", "1/2")}}


def test_eval_hands_are_per_axis_rms_averaged_over_axes_hands_and_takes_in_cm(monkeypatch):
    """The issue's eval figures: hands in cm, per axis, averaged over the 6 axes (1 cm on
    one axis: 1/6 cm, not the pooled RMS 1/sqrt(6) cm) and over the takes (task a: 1 take at
    1 cm, task b: 3 takes at 2 cm: (1/6 + 3 x 2/6) / 4 = 7/24 cm); postures in rad; the
    recognition accuracy with no observation, after 1/4 and after 1/2 (weighted by takes);
    the 2σ coverage pooled over the (sample, signal) pairs."""
    import promp.evaluation
    import teleop.prescient.training
    from teleop import train_cli

    fakes = {"a": _fake_result(1, 0.01, 0.11, 1.0, 0.9, 100), "b": _fake_result(3, 0.02, 0.22, 1 / 3, 0.5, 300)}
    monkeypatch.setattr(train_cli, "_learn", lambda takes, *a, **k: None)
    monkeypatch.setattr(teleop.prescient.training, "to_demonstration", lambda trajectory: trajectory)
    monkeypatch.setattr(promp.evaluation, "evaluate_library",
                        lambda library, demos, labels, **kw: fakes[labels[0]])
    takes = [SimpleNamespace(path=Path(f"{label}_{i}.npz"), label=label, trajectory=None, performer=None)
             for label, n in (("a", 1), ("b", 3)) for i in range(n)]
    result = train_cli.evaluate(takes, takes)
    for key in ("hand_rms_cm", "hand_rms_whole_cm", "hand_rms_prior_cm"):
        assert set(result[key]) == {"none", "recog", "quarter", "half"}
        for value in result[key].values():
            assert value == pytest.approx(7.0 / 24.0)
    assert result["per_task"]["a"]["hand_rms_cm"]["half"] == pytest.approx(1.0 / 6.0)
    assert result["posture_rms_rad"]["half"] == pytest.approx((0.01 + 3 * 0.02) / 4)
    assert result["recognition"] == {"none": pytest.approx(0.5), "quarter": pytest.approx(0.5),
                                     "half": pytest.approx(0.5)}
    assert result["coverage_2sigma"] == pytest.approx((0.9 * 100 + 0.5 * 300) / 400)
    assert result["n_test"] == 4
