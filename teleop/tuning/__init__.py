"""Joint PID tuning toolkit (reference: ../shared/reference/pid_tuning_and_sim_to_real.md, Part A).

One concern per module, data flowing one way:

* :mod:`pid` — the product's joint PID (parallel form, anti-windup, filtered D, torque limit).
* :mod:`gains_io` — per-joint gains to and from JSON (the reference's ``PidConfiguration``).
* :mod:`experiment_data` — set-point vs measured angle per joint over time (``PidStepData``).
* :mod:`metrics` — the reference's evaluation metrics (§3.3.1–3.3.2) and their aggregation.
* :mod:`peaks` — peak detection (§3.3.3), used by the relay test.
* :mod:`relay` — relay auto-tuning: T_u and K_u (§3.5.2).
* :mod:`heuristics` — the seven Ziegler–Nichols-family rules (§3.5.2).
* :mod:`motions` — set-point trajectories: recorded motions played back, and step tests.
* :mod:`setups` — the four simulated setups of §4.1 on our iCub.
* :mod:`rig` — the simulated left arm under PID torque control (pybullet).
* :mod:`optimiser` — a tuner that optimises a limb's gains together on recorded motions.
* :mod:`experiment` — the reference's experiment (§4.1) on our robot.
* :mod:`report` — tables (side by side with the reference's) and plots.
* :mod:`cli` — ``teleop tune``.
"""
