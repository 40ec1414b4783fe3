"""The actuator model (teleop.sim.actuator, teleop.sim.servo): parameter files, latency,
friction, torque limit, sensor noise; off by default, on it keeps the robot standing."""

import json

import numpy as np
import pytest

from teleop.sim.actuator import (ActuatorFileError, ActuatorParams, description_actuator_params,
                                 load_actuator_params, write_actuator_params)
from teleop.sim.servo import JointServo

TOML = """
latency = 0.016
seed = 3
[default]
kp = 100.0
kd = 2.0
[joints."*_wrist_*"]
kp = 10.0
coulomb = 0.05
[joints."r_wrist_yaw"]
kp = 7.0
[links."r_hand"]
mass_scale = 1.1
com_scale = 0.9
"""


def _load(tmp_path, robot, text, name="act.toml"):
    path = tmp_path / name
    path.write_text(text)
    return load_actuator_params(path, robot.joint_names, robot.limits.effort)


def test_parameter_file_patterns_then_exact_names(tmp_path, robot):
    p = _load(tmp_path, robot, TOML)
    j = robot.joint_index
    assert p.kp[j("l_knee")] == 100.0 and p.kd[j("l_knee")] == 2.0
    assert p.kp[j("l_wrist_pitch")] == 10.0 and p.coulomb[j("l_wrist_pitch")] == 0.05
    assert p.kp[j("r_wrist_yaw")] == 7.0 and p.coulomb[j("r_wrist_yaw")] == 0.05
    assert p.torque_limit[j("l_knee")] == robot.limits.effort[j("l_knee")]  # description default
    assert p.latency == 0.016 and p.seed == 3 and p.link_scales == {"r_hand": (1.1, 0.9)}


def test_json_and_toml_round_trip(tmp_path, robot):
    p = _load(tmp_path, robot, TOML)
    p.feedforward = "none"                                 # not the default: it must be written
    p.noise_std[robot.joint_index("l_elbow")] = 0.0007     # a per-joint value off the defaults
    for name in ("out.toml", "out.json"):
        write_actuator_params(p, tmp_path / name)
        q = load_actuator_params(tmp_path / name, robot.joint_names, robot.limits.effort)
        for key in ("kp", "kd", "viscous", "coulomb", "torque_limit", "noise_std"):
            assert np.array_equal(getattr(p, key), getattr(q, key))
        assert q.latency == p.latency and q.link_scales == p.link_scales
        # Every field, the noise seed and the feed-forward too (seed 3 is not the default 0).
        assert (q.seed, q.feedforward, q.joint_names) == (3, "none", p.joint_names), name


@pytest.mark.parametrize("text, fragment", [
    ("kp = [", "not valid TOML"),
    ("[default]\nkp = -1.0", "must be >= 0"),
    ("[default]\nstiffness = 1.0", "unknown key 'stiffness'"),
    ('[joints."no_such_*"]\nkp = 1.0', "matches no joint"),
    ('feedforward = "magic"', "feedforward must be one of"),
    ("latency = \"16 ms\"", "latency must be a finite number"),
])
def test_malformed_parameter_file_names_the_file(tmp_path, robot, text, fragment):
    with pytest.raises(ActuatorFileError) as err:
        _load(tmp_path, robot, text, "broken.toml")
    assert "broken.toml" in str(err.value) and fragment in str(err.value)


def test_malformed_json_and_missing_file_name_the_file(tmp_path, robot):
    with pytest.raises(ActuatorFileError, match="bad.json.*not valid JSON"):
        _load(tmp_path, robot, "{", "bad.json")
    with pytest.raises(ActuatorFileError, match="missing.toml"):
        load_actuator_params(tmp_path / "missing.toml", robot.joint_names, robot.limits.effort)


@pytest.mark.parametrize("name, data, fragment", [
    ("big.json", b'{"latency": 1' + b"0" * 400 + b"}", "latency must be a finite number"),
    ("big.toml", b"[default]\nkp = 1" + b"0" * 400 + b"\n", "default.kp must be a finite number"),
    ("seed.json", b'{"seed": -1}', "seed must be an integer"),
    ("deep.json", b'{"default": ' + b"[" * 100000 + b"]" * 100000 + b"}", "not valid JSON"),
    ("deep.toml", b"a = " + b"[" * 100000 + b"]" * 100000 + b"\n", "not valid TOML"),
    ("digits.json", b'{"latency": ' + b"3" * 5000 + b"}", "not valid JSON"),
    ("digits.toml", b"latency = " + b"3" * 5000 + b"\n", "not valid TOML"),
    ("latin1.json", b'{"feedforward": "caf\xe9"}', "not valid JSON"),
    ("latin1.toml", b'feedforward = "caf\xe9"\n', "not valid TOML"),
])
def test_hostile_parameter_file_is_an_actuator_file_error(tmp_path, name, data, fragment):
    """Each used to escape as OverflowError, RecursionError, ValueError or UnicodeDecodeError."""
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(ActuatorFileError) as err:
        load_actuator_params(path, ["a"], np.ones(1))
    assert name in str(err.value) and fragment in str(err.value) and "\n" not in str(err.value)


def _servo(n=1, inertia=0.01, limit=5.0, **values):
    params = ActuatorParams.uniform([f"j{i}" for i in range(n)], np.full(n, limit), **values)
    return JointServo(params, np.full(n, inertia), dt=0.001)


def test_command_latency_is_applied_after_the_configured_delay():
    servo = _servo(kp=100.0, kd=0.0, latency=0.016)
    servo.command(np.array([0.1]))
    torques = [servo.torques(np.zeros(1), np.zeros(1))[0][0] for _ in range(20)]
    assert np.allclose(torques[:16], 0.0)  # 16 steps of 1 ms: the command is still in flight
    assert all(t > 0 for t in torques[16:])


def test_fractional_latency_blends_neighbouring_commands():
    servo = _servo(kp=10.0, kd=0.0, latency=0.0105)
    servo.command(np.array([0.1]))
    torques = [servo.torques(np.zeros(1), np.zeros(1))[0][0] for _ in range(13)]
    full = torques[12]
    assert np.allclose(torques[:10], 0.0) and torques[10] == pytest.approx(0.5 * full) and torques[11] == full


def test_torque_limit_and_friction_laws():
    servo = _servo(kp=1000.0, kd=0.0, coulomb=0.2, viscous=0.0)
    servo.command(np.array([1.0]))
    motor, friction = servo.torques(np.zeros(1), np.zeros(1))
    assert motor[0] == 5.0  # clipped to the limit
    # Coulomb friction opposes motion with k_c ...
    _, friction = servo.torques(np.zeros(1), np.array([1.0]))
    assert friction[0] == pytest.approx(-0.2)
    # ... but near rest it is a damper weaker than what stops the joint within a step (I v / dt).
    _, friction = servo.torques(np.zeros(1), np.array([-0.001]))
    assert 0.0 < friction[0] <= 0.25 * 0.01 * 0.001 / 0.001


def test_stable_pd_reduces_to_plain_pd_on_heavy_joints():
    heavy = _servo(kp=100.0, kd=2.0, inertia=1e6, limit=100.0)
    heavy.command(np.array([0.1]), np.array([0.5]))
    motor, _ = heavy.torques(np.zeros(1), np.array([0.2]))
    # B4 evaluated at the end of the step: q + dt qdot.
    assert motor[0] == pytest.approx(100.0 * (0.1 - 0.001 * 0.2) + 2.0 * (0.5 - 0.2), rel=1e-6)


def test_coupled_stable_pd_is_the_pd_at_the_end_of_the_step():
    """With the coupled inverse inertia, the torque is B4's PD evaluated at the velocity and
    angle the step ends with: tau = K_p (q_bar - q - dt v1) + K_d (qdot_bar - v1), v1 = v0 +
    dt M^-1 tau. Without friction, no other damping may enter S (a phantom Coulomb damper
    did: 1.3 N m off)."""
    rng = np.random.default_rng(0)
    n, dt = 4, 0.001
    a = rng.normal(size=(n, n))
    inverse = np.linalg.inv(0.01 * a @ a.T + 0.005 * np.eye(n))
    servo = JointServo(ActuatorParams.uniform([f"j{i}" for i in range(n)], np.full(n, 1e6), kp=200.0, kd=20.0),
                       1.0 / np.diag(inverse), dt)
    servo.set_inverse_inertia(inverse)
    target, target_velocity = rng.normal(size=n) * 0.1, rng.normal(size=n)
    servo.command(target, target_velocity)
    q0, v0 = rng.normal(size=n) * 0.01, rng.normal(size=n)
    tau, friction = servo.torques(q0, v0)
    v1 = v0 + dt * inverse @ tau
    assert friction is None
    np.testing.assert_allclose(tau, 200.0 * (target - q0 - dt * v1) + 20.0 * (target_velocity - v1), atol=1e-9)


def test_off_by_default_changes_nothing(robot, monkeypatch):
    from teleop.sim.simulator import Simulation

    monkeypatch.delenv("TELEOP_SIM_SERVO", raising=False)
    assert robot.description.sim["actuator"]["enabled"] is False
    with Simulation(robot, visual=False) as sim:
        assert sim.actuator is None and sim.servo_kind == "pybullet" and sim._servo is None


def _hung(robot, sim):
    q = robot.home_configuration()
    q[2] += 0.5
    sim.reset(q)
    return q


def test_simulated_latency_and_noise(robot):
    from teleop.sim.simulator import Simulation

    params = description_actuator_params(robot)
    params.noise_std[:] = 0.001
    elbow = robot.joint_index("r_elbow")
    with Simulation(robot, visual=False, fixed_base=True, collisions=False, actuator=params) as sim:
        q = _hung(robot, sim)
        sim.step(200)
        rest = sim._true_joint_states()[0][elbow]
        target = q[7:].copy()
        target[elbow] += 0.2
        sim.set_joint_targets(target)
        sim.step(15)
        assert abs(sim._true_joint_states()[0][elbow] - rest) < 1e-4  # 16 ms latency: not yet
        sim.step(200)
        assert sim._true_joint_states()[0][elbow] - rest > 0.1
        noise = np.array([sim.joint_positions() - sim._true_joint_states()[0] for _ in range(200)])
        assert np.std(noise) == pytest.approx(0.001, rel=0.1)
        assert abs(sim.state().q[7 + elbow] - sim._true_joint_states()[0][elbow]) < 0.006


def test_robot_stands_with_the_nominal_actuator_model(robot):
    from teleop.sim.simulator import GRAVITY, Simulation

    with Simulation(robot, visual=False, actuator=description_actuator_params(robot)) as sim:
        sim.step(300)
        forces = []
        for _ in range(50):
            sim.set_joint_targets(robot.home_joints())
            sim.step(10)
            forces.append(sim.foot_contact("left").force + sim.foot_contact("right").force)
        assert sim.other_contacts() == 0
        assert abs(np.mean(forces) - robot.total_mass * GRAVITY) / (robot.total_mass * GRAVITY) < 0.05
        assert np.abs(sim._true_joint_states()[0] - robot.home_joints()).max() < 0.01


def test_link_scales_change_the_simulated_mass(robot):
    import pybullet as pb

    from teleop.sim.simulator import Simulation

    masses = []
    for scale in (1.0, 2.0):
        params = description_actuator_params(robot)
        params.link_scales = {"r_upper_arm": (scale, 1.0)}
        with Simulation(robot, visual=False, fixed_base=True, collisions=False, actuator=params) as sim:
            link = sim.link_index["r_upper_arm"]
            masses.append((pb.getDynamicsInfo(sim.body, link, physicsClientId=sim.client)[0], sim.total_mass()))
    (m1, total1), (m2, total2) = masses
    assert m2 == pytest.approx(2.0 * m1) and total2 - total1 == pytest.approx(m1)


def test_description_actuator_file_is_read(tmp_path, robot):
    from teleop.robot.description import load_description
    from teleop.robot.model import RobotModel
    from teleop.sim.simulator import Simulation

    text = (robot.description.source.read_text()
            .replace("enabled = false", f'enabled = true\nfile = "{tmp_path}/a.json"'))
    (tmp_path / "icub_test.toml").write_text(text.replace('urdf = "package:', 'urdf = "package:'))
    (tmp_path / "a.json").write_text(json.dumps({"latency": 0.005, "default": {"kp": 50.0, "kd": 1.0}}))
    other = RobotModel(load_description(tmp_path / "icub_test.toml"))
    with Simulation(other, visual=False, fixed_base=True, collisions=False) as sim:
        assert sim.actuator is not None and sim.actuator.latency == 0.005 and sim.servo_kind == "explicit"
    (tmp_path / "a.json").write_text("{")
    with pytest.raises(ActuatorFileError, match="a.json"):
        Simulation(other, visual=False, fixed_base=True, collisions=False)


def test_environment_variable_switches_the_actuator_model_for_every_simulation(tmp_path, robot, monkeypatch):
    """$TELEOP_SIM_ACTUATOR: a parameter file (or on/off) applies to simulations made
    without an explicit ``actuator`` argument, as the demo, stations, trials and tuning make them."""
    from teleop.sim.simulator import ACTUATOR_ENV, Simulation

    path = tmp_path / "fitted.toml"
    path.write_text(TOML)
    monkeypatch.setenv(ACTUATOR_ENV, str(path))
    with Simulation(robot, visual=False) as sim:
        assert sim.actuator is not None and sim.servo_kind == "explicit"
        assert sim.actuator.kp[robot.joint_index("r_wrist_yaw")] == 7.0
    monkeypatch.setenv(ACTUATOR_ENV, "off")
    with Simulation(robot, visual=False) as sim:
        assert sim.actuator is None
    monkeypatch.setenv(ACTUATOR_ENV, "on")
    with Simulation(robot, visual=False) as sim:
        assert sim.actuator is not None
    monkeypatch.setenv(ACTUATOR_ENV, str(tmp_path / "missing.toml"))
    with pytest.raises(ActuatorFileError, match="no such parameter file"):
        Simulation(robot, visual=False)
    # A file that is there but no parameter file is named by the variable too: a user who
    # set it long ago would not know where it comes from.
    junk = tmp_path / "image.png"
    junk.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    monkeypatch.setenv(ACTUATOR_ENV, str(junk))
    with pytest.raises(ActuatorFileError) as exc:
        Simulation(robot, visual=False)
    assert str(exc.value).startswith(f"${ACTUATOR_ENV}: {junk}: ")


def test_sensor_noise_restarts_with_a_reset(robot):
    """Sessions that begin with a reset read the same sensor noise (lock-step sessions are
    promised to be reproducible); before, the noise stream ran on across resets."""
    from teleop.sim.simulator import Simulation

    params = description_actuator_params(robot)
    params.noise_std[:] = 0.001
    with Simulation(robot, visual=False, fixed_base=True, collisions=False, actuator=params) as sim:
        readings = []
        for _ in range(2):
            sim.reset()
            sim.step(5)
            readings.append(sim.joint_positions())
        np.testing.assert_array_equal(readings[0], readings[1])
