"""AprilTag detection and 6-DoF pose on images the product renders (teleop/jog/render.py):
known tag poses in, measured poses out."""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin
import pytest

from teleop.jog.camera_intrinsics import CameraCalibration
from teleop.jog.detection import ArucoTagDetector, PupilTagDetector, make_detector, pupil_available
from teleop.jog.render import FACING_CAMERA, rotation_from_rpy, tag_scene

TAG = 0.08
CAL = CameraCalibration.pinhole(640, 480, 60.0)

#: (roll, pitch, yaw [rad], centre (3,) [m]) of the tag in the camera frame.
POSES = [
    ((0.0, 0.0, 0.0), (0.0, 0.0, 0.5)),
    ((0.3, -0.2, 0.4), (0.06, -0.04, 0.45)),
    ((-0.25, 0.35, -0.8), (-0.08, 0.05, 0.6)),
    ((0.1, 0.2, 2.5), (0.02, 0.07, 0.7)),  # upside down-ish: corner order must follow the tag
]

BACKENDS = ["aruco"] + (["pupil"] if pupil_available() else [])


def _render(rpy, centre, noise=2.0, seed=0, blur_m=0.0):
    scene = tag_scene(TAG, CAL.K, seed=seed)
    R = rotation_from_rpy(*rpy) @ FACING_CAMERA
    t = np.array(centre, dtype=float)
    # Motion blur: sub-frames spread along x over blur_m.
    offsets = np.linspace(-0.5, 0.5, 5) * blur_m if blur_m else [0.0]
    image = scene.render([(R, t + [o, 0.0, 0.0]) for o in offsets], noise, np.random.default_rng(seed))
    return image, R, t


@pytest.mark.parametrize("backend", BACKENDS)
def test_pose_accuracy_on_rendered_tags(backend):
    detector = make_detector(backend, CAL, TAG)
    for k, (rpy, centre) in enumerate(POSES):
        image, R, t = _render(rpy, centre, seed=k)
        detections = detector.detect(image)
        assert len(detections) == 1, (backend, rpy, centre)
        d = detections[0]
        assert d.tag_id == 0
        position_error_mm = np.linalg.norm(d.t - t) * 1e3
        angle_error_deg = math.degrees(np.linalg.norm(pin.log3(R.T @ d.R)))
        # 8 cm tag at 0.45-0.7 m, 640x480: a few mm (mostly along the optical axis) and a few degrees.
        assert position_error_mm < 0.01 * t[2] * 1e3, (backend, k, position_error_mm)
        assert angle_error_deg < 4.0, (backend, k, angle_error_deg)
        assert d.reprojection_px < 1.0
        assert np.allclose(d.R.T @ d.R, np.eye(3), atol=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_motion_blur_and_noise_still_detected(backend):
    detector = make_detector(backend, CAL, TAG)
    image, R, t = _render((0.1, 0.1, 0.2), (0.03, 0.0, 0.5), noise=4.0, blur_m=0.004, seed=3)
    d = detector.detect(image)
    assert d and np.linalg.norm(d[0].t - t) < 0.006


def test_no_tag_no_detection_and_id_filter():
    image, _, _ = _render((0.0, 0.0, 0.0), (0.0, 0.0, 0.5))
    empty = tag_scene(TAG, CAL.K, seed=5).render([(FACING_CAMERA, np.array([0.0, 0.0, -5.0]))], 2.0,
                                                 np.random.default_rng(0))  # tag behind the camera: not in view
    assert ArucoTagDetector(CAL, TAG).detect(empty) == []
    assert ArucoTagDetector(CAL, TAG, tag_ids={3}).detect(image) == []
    assert len(ArucoTagDetector(CAL, TAG, tag_ids={0}).detect(image)) == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (4, 640), (640, 4), (15, 640)])
def test_frames_too_small_for_a_tag_give_no_detection(backend, shape):
    # pupil-apriltags segfaulted on frames under 5 px high (teleop jog then hung, deaf to
    # Ctrl-C); no such frame can hold a tag of 10 cells across anyway.
    detector = make_detector(backend, CAL, TAG)
    assert detector.detect(np.full(shape, 128, np.uint8)) == []
    assert detector.detect(np.full((*shape, 3), 128, np.uint8)) == []


def test_backends_agree_and_bad_arguments():
    if not pupil_available():
        pytest.skip("pupil-apriltags (a core dependency) is not installed in this environment, "
                    "so there is no second backend to compare with OpenCV's")
    image, _, t = _render((0.2, -0.1, 0.3), (0.05, -0.03, 0.5))
    a = ArucoTagDetector(CAL, TAG).detect(image)[0]
    p = PupilTagDetector(CAL, TAG).detect(image)[0]
    assert np.linalg.norm(a.t - p.t) < 0.005
    assert np.allclose(a.corners, p.corners, atol=1.5)  # same corner order


def test_invalid_detector_arguments():
    with pytest.raises(ValueError):
        make_detector("nope", CAL, TAG)
    with pytest.raises(ValueError):
        ArucoTagDetector(CAL, 0.0)
