"""Per-physics-step joint targets between control ticks (teleop.sim.target_spline)."""

import numpy as np
import pytest

from teleop.sim.target_spline import TickInterpolator

TICK, STEPS = 0.01, 10


def play(kind, commands):
    interpolator = TickInterpolator(commands[0], kind)
    positions, velocities = zip(*(interpolator.targets(q, STEPS, TICK) for q in commands[1:]))
    return np.concatenate(positions), np.concatenate(velocities)


def test_spline_velocity_is_continuous_and_its_acceleration_is_the_commands():
    rng = np.random.default_rng(0)
    commands = np.cumsum(rng.normal(scale=0.01, size=(40, 3)), axis=0)
    positions, velocities = play("spline", commands)
    step = TICK / STEPS
    # the velocities are the derivative of the positions (to the finite-difference error)...
    np.testing.assert_allclose(np.diff(positions, axis=0) / step, 0.5 * (velocities[1:] + velocities[:-1]), atol=1e-9)
    # ...and continuous: within and across ticks they change by one step's constant acceleration
    tick_velocities = np.diff(commands, axis=0) / TICK
    accelerations = np.diff(tick_velocities, axis=0) / TICK           # per tick, from the commands
    jumps = np.abs(np.diff(velocities, axis=0)) / step
    assert jumps.max() <= np.abs(accelerations).max() + 1e-6
    # each segment ends at the midpoint between commands (half a tick of latency)
    np.testing.assert_allclose(positions[STEPS - 1::STEPS][1:], 0.5 * (commands[1:-1] + commands[2:]), atol=1e-12)


def test_linear_ramp_ends_on_each_command_and_jumps_at_ticks():
    commands = np.array([[0.0], [0.0], [0.01], [0.03]])
    positions, velocities = play("linear", commands)
    np.testing.assert_allclose(positions[STEPS - 1::STEPS], commands[1:], atol=1e-12)
    assert velocities[STEPS, 0] == pytest.approx(1.0) and velocities[2 * STEPS, 0] == pytest.approx(2.0)


def test_spline_stays_within_the_commands_range():
    """A convex combination of the commands: joint limits the commands respect hold."""
    rng = np.random.default_rng(1)
    commands = rng.uniform(-1, 1, size=(30, 5))
    positions, _ = play("spline", commands)
    assert np.all(positions <= commands.max(axis=0) + 1e-12) and np.all(positions >= commands.min(axis=0) - 1e-12)


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="interpolation"):
        TickInterpolator(np.zeros(2), "cubic")
