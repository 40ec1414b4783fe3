"""The robot model and its description."""

import numpy as np
import pytest

from teleop.robot.description import DescriptionError, load_description
from retarget.polygon import convex_hull
from teleop.robot.model import NQ_BASE, RobotModel


def test_icub_has_32_joints_and_about_33_kg(robot):
    assert robot.n_joints == 32
    assert robot.nq == 39 and robot.nv == 38
    assert 32.0 < robot.total_mass < 34.0
    for group, size in (("left_leg", 6), ("right_leg", 6), ("torso", 3), ("left_arm", 7), ("right_arm", 7),
                        ("neck", 3)):
        assert len(robot.group_indices(group)) == size


def test_description_limits_replace_urdf_placeholders(robot):
    # The URDF gives 5e4 for upper-body limits; the description must replace them.
    assert np.all(robot.limits.velocity < 20.0)
    assert np.all(robot.limits.effort < 100.0)
    assert np.all(robot.limits.lower < robot.limits.upper)


def test_home_stands_on_the_ground_facing_forward(robot):
    q = robot.home_configuration()
    robot.update(q)
    corners = np.vstack([robot.sole_corners("left"), robot.sole_corners("right")])
    assert np.allclose(corners[:, 2], 0.0, atol=1e-4)  # soles flat on the ground (URDF asymmetry ~0.03 mm)
    assert robot.position("left_sole")[1] > 0 > robot.position("right_sole")[1]  # y is left
    assert robot.position("left_eye")[0] > robot.position("head")[0]  # eyes look along +x
    com = robot.com()
    assert 0.4 < com[2] < 0.7
    # The CoM projects inside the support polygon.
    hull = robot.support_polygon()
    edges = np.roll(hull, -1, axis=0) - hull
    to_com = com[:2] - hull
    assert np.all(edges[:, 0] * to_com[:, 1] - edges[:, 1] * to_com[:, 0] > 0.01 * 0.01)


def test_home_posture_within_limits(robot):
    joints = robot.home_configuration()[NQ_BASE:]
    assert np.all(joints >= robot.limits.lower) and np.all(joints <= robot.limits.upper)


def test_eye_frames_exist_and_are_apart(robot):
    robot.update(robot.home_configuration())
    baseline = np.linalg.norm(robot.position("left_eye") - robot.position("right_eye"))
    assert 0.05 < baseline < 0.09


def test_unknown_description_gives_clear_error():
    # The names as a user types them (was "(available: ['icub'])", a Python list).
    with pytest.raises(DescriptionError, match=r"no robot description 'no_such_robot' \(available: icub; or the "
                                               r"path of a description \.toml\)"):
        load_description("no_such_robot")


def test_description_missing_roles_is_rejected(tmp_path):
    text = (load_description().source.read_text()).replace('left_hand = "l_hand"\n', "")
    bad = tmp_path / "bad.toml"
    # The URDF reference is relative to the description folder: make it absolute.
    bad.write_text(text)
    with pytest.raises(DescriptionError, match="left_hand"):
        load_description(bad)


def test_another_robot_is_a_description_file(tmp_path):
    """A new robot = a TOML file: here the same URDF under another name and home posture."""
    text = load_description().source.read_text().replace('name = "iCub"', 'name = "iCub-crouched"')
    text = text.replace("l_knee = -0.45", "l_knee = -0.9").replace("r_knee = -0.45", "r_knee = -0.9")
    text = text.replace("l_hip_pitch = 0.25", "l_hip_pitch = 0.45").replace("r_hip_pitch = 0.25", "r_hip_pitch = 0.45")
    text = (text.replace("l_ankle_pitch = -0.2", "l_ankle_pitch = -0.45")
            .replace("r_ankle_pitch = -0.2", "r_ankle_pitch = -0.45"))
    path = tmp_path / "crouched.toml"
    path.write_text(text)
    other = RobotModel(path)
    assert other.description.name == "iCub-crouched"
    other.update(other.home_configuration())
    robot = RobotModel()
    robot.update(robot.home_configuration())
    assert other.position("waist")[2] < robot.position("waist")[2] - 0.02


def test_convex_hull_is_counter_clockwise():
    pts = np.array([[0, 0], [1, 0], [1, 1], [0, 1], [0.5, 0.5]])
    hull = convex_hull(pts)
    assert len(hull) == 4
    area = 0.5 * np.sum(hull[:, 0] * np.roll(hull[:, 1], -1) - np.roll(hull[:, 0], -1) * hull[:, 1])
    assert area == pytest.approx(1.0)


@pytest.mark.parametrize("old, new, message", [
    ('parent = "head"', "xparent = 1", r"extra_frames\.\w+ needs parent"),
    ('parent = "head"', 'parent = "hed"', "parent 'hed' of extra frame"),
    ("l_knee = -0.45", "l_knee = -0.45\nl_elbw = 0.5", r"\[home\] names joints that are not in the URDF: \['l_elbw'\]"),
    ("l_knee = -0.45", 'l_knee = "bent"', r"\[home\] l_knee must be a number"),
])
def test_typos_in_a_description_are_clear_errors(tmp_path, old, new, message):
    """Each used to end in a KeyError, IndexError or AttributeError traceback."""
    text = load_description().source.read_text()
    assert old in text
    bad = tmp_path / "typo.toml"
    bad.write_text(text.replace(old, new, 1))
    with pytest.raises(DescriptionError, match=message):
        RobotModel(bad)


def test_a_binary_file_given_as_description_is_named(tmp_path, capsys):
    """An image given as --robot: a DescriptionError naming the file (before: the UTF-8
    decoder's "can't decode byte 0x89 in position 0" with no file, from every command)."""
    image = tmp_path / "pic.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    with pytest.raises(DescriptionError, match="not a text file") as exc:
        load_description(image)
    assert str(image) in str(exc.value)
    from teleop.cli import main

    assert main(["info", "--robot", str(image)]) != 0
    err = capsys.readouterr().err
    assert str(image) in err and "not a text file" in err and "Traceback" not in err
