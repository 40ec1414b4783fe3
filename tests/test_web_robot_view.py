"""3D robot view of the web viewer: FEEDBACK carries the robot's poses, the server builds
the skeletons, the page draws them (checked in headless Chromium on a screenshot)."""

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request

import numpy as np
import pytest

from retarget.references import FLAT_SIZE
from teleop.control.tracker import references_from_configuration
from teleop.net.protocol import Feedback, MalformedPacket, PacketCodec, decode_feedback, encode_feedback
from teleop.video.robot_view import POSE_NAMES, RobotPoseView
from teleop.video.web import VideoWebViewer


@pytest.fixture(scope="module")
def view():
    return RobotPoseView()


def posed(robot, **joints):
    """(nq,) home configuration with some joints changed [rad]."""
    q = robot.home_configuration()
    for name, value in joints.items():
        q[7 + robot.joint_index(name)] = value
    return q


# --------------------------------------------------------------------------- protocol
def test_feedback_carries_measured_and_commanded_configurations():
    q = np.linspace(-1.0, 1.0, 39)
    full = Feedback(last_ref_seq=5, forward_delay=0.7, executed=np.arange(FLAT_SIZE, dtype=float),
                    measured_com_xy=np.array([0.01, 0.02]), measured_q=q, commanded_q=q[::-1].copy())
    payload = encode_feedback(full)
    assert len(payload) == 52 + 160 + 16 + 2 * (2 + 8 * 39)  # 856 bytes: fits one datagram
    assert decode_feedback(payload) == full
    # Additive: the old layout (no configurations) encodes to the same bytes as before.
    old = Feedback(last_ref_seq=5, executed=np.zeros(FLAT_SIZE), measured_com_xy=np.zeros(2))
    assert len(encode_feedback(old)) == 52 + 160 + 16
    assert decode_feedback(encode_feedback(old)) == old
    only_measured = Feedback(measured_q=q)
    assert decode_feedback(encode_feedback(only_measured)) == only_measured
    for bad in (payload[:-8], payload + b"\0" * 8):  # truncated / trailing bytes
        with pytest.raises(MalformedPacket):
            decode_feedback(bad)
    codec = PacketCodec(b"0123456789abcdef-test-secret")
    packet = codec.decode(codec.encode(full, source_id=1, stream_id=4, seq=1, send_time=0.0))
    assert packet.message == full and packet.size <= codec.max_datagram


def test_robot_station_feedback_reaches_the_operator_view(robot, view, monkeypatch):
    """Robot and operator stations on the virtual link: the operator's FEEDBACK holds the
    measured and commanded configurations and the view draws all three poses."""
    from teleop.clock import VirtualClock
    from teleop.inputs.synthetic import SyntheticOperator
    from teleop.net.delay import LinkModel
    from teleop.net.virtual import connect_virtual
    from teleop.robot.target import robot_target
    from teleop.sim.simulator import Simulation
    from teleop.stations.operator_station import OperatorStation
    from teleop.stations.robot_station import RobotStation, RobotStationConfig

    from teleop.sim.simulator import ACTUATOR_ENV

    monkeypatch.delenv(ACTUATOR_ENV, raising=False)   # no sensor noise: states compare exactly
    clock = VirtualClock()
    operator_ep, robot_ep = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=3)
    sim = Simulation(robot, visual=False)
    try:
        station = RobotStation(robot_ep, robot, sim, None, RobotStationConfig(video_hz=0))
        operator = OperatorStation(operator_ep, robot_ep.address, SyntheticOperator(seed=0), robot_target(robot))
        states = []
        for k in range(60):
            clock.set(k * 0.01)
            operator.tick()
            station.tick()
            states.append(sim.state().q.copy())
    finally:
        sim.close()
    feedback = operator.feedback
    assert feedback is not None and feedback.measured_q.shape == (robot.nq,) == feedback.commanded_q.shape
    # The measured configuration is one the simulation was in (bit for bit: float64 on the
    # wire), not the command; the command differs from it by the tracking error.
    assert any(np.array_equal(feedback.measured_q, q) for q in states)
    assert not any(np.array_equal(feedback.commanded_q, q) for q in states)
    # ... and the measured CoM sent with it is that configuration's (pinocchio).
    import pinocchio as pin

    com = pin.centerOfMass(robot.model, robot.model.createData(), feedback.measured_q)
    np.testing.assert_allclose(feedback.measured_com_xy, com[:2], atol=1e-12)
    view.min_interval_s = 1e6  # any number of pages: one document per interval
    try:
        document = view.from_station(operator)
        assert view.from_station(operator) is document
    finally:
        view.min_interval_s = 0.1
    assert all(document["poses"][name] is not None for name in POSE_NAMES)
    # The robot stands still near home after 0.6 s: its measured soles are on the ground.
    soles = np.array(document["poses"]["actual"]["soles"])
    assert np.all(np.abs(soles[..., 2]) < 0.02)


# --------------------------------------------------------------------------- skeletons
def test_skeleton_points_follow_the_configuration(robot, view):
    home = robot.home_configuration()
    skeleton = view.skeleton.points(home)
    assert set(skeleton["chains"]) == {"left_leg", "right_leg", "torso", "neck", "left_arm", "right_arm"}
    for points in skeleton["chains"].values():
        assert np.shape(points)[1] == 3 and len(points) >= 2
    robot.update(home)
    np.testing.assert_allclose(skeleton["chains"]["left_arm"][-1], robot.position("left_hand"), atol=1e-3)
    np.testing.assert_allclose(np.array(skeleton["soles"])[..., 2], 0.0, atol=1e-3)  # home stands on z = 0
    assert skeleton["gaze"][1][0] > skeleton["gaze"][0][0]  # the head looks forward (+x) at home
    raised = view.skeleton.points(posed(robot, l_shoulder_pitch=-1.4))
    hand_home, hand_raised = skeleton["chains"]["left_arm"][-1], raised["chains"]["left_arm"][-1]
    assert hand_raised[2] > hand_home[2] + 0.1  # shoulder pitch forward lifts the hand
    assert raised["chains"]["right_arm"] == skeleton["chains"]["right_arm"]


def test_ghost_reaches_the_references_and_bad_input_is_reported(robot, view):
    target_q = posed(robot, l_shoulder_pitch=-0.9, l_elbow=1.0, torso_pitch=0.2)
    references = references_from_configuration(robot, target_q, t=3.0)
    for _ in range(6):  # warm-started refinement over consecutive requests
        document = view.document(references)
    ghost = document["poses"]["ghost"]
    np.testing.assert_allclose(ghost["chains"]["left_arm"][-1], references.left_hand, atol=0.01)
    assert document["poses"]["actual"] is None and document["poses"]["predicted"] is None
    bad = view.document(None, measured_q=np.full(robot.nq, np.nan), commanded_q=np.zeros(5))
    assert bad["poses"]["actual"] is None and "actual_error" in bad["info"] and "predicted_error" in bad["info"]
    json.dumps(bad, allow_nan=False)


def test_robot_pose_route_and_script(view, robot):
    plain = VideoWebViewer(port=0, streams=("left",))
    with plain:
        page = urllib.request.urlopen(plain.url, timeout=5).read().decode()
        assert "/robot_view.js" not in page  # no provider: the hook stays free for others
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(plain.url + "robot-pose", timeout=5)
        assert error.value.code == 404
    home = robot.home_configuration()
    viewer = VideoWebViewer(port=0, streams=("left",), robot_pose_provider=lambda: view.document(None, home, home))
    with viewer:
        page = urllib.request.urlopen(viewer.url, timeout=5).read().decode()
        assert '<script src="/robot_view.js"' in page and 'id="robot-view-legend"' in page
        script = urllib.request.urlopen(viewer.url + "robot_view.js", timeout=5).read().decode()
        assert "setRenderer" in script and "://" not in script  # no remote URL: the product runs offline
        document = json.loads(urllib.request.urlopen(viewer.url + "robot-pose", timeout=5).read())
        assert document["poses"]["ghost"] is None and document["poses"]["actual"]["chains"]["left_leg"]


# --------------------------------------------------------------------------- browser
CANVAS_BACKGROUND = np.array([30, 14, 10])  # BGR of rgb(10, 14, 30), robot_view.js BACKGROUND
#: OpenCV hue bands (0-179) of the three pose colours in robot_view.js.
HUES = {"actual": (10, 25), "ghost": (85, 105), "predicted": (120, 145)}


def find_chromium() -> str | None:
    candidates = [os.environ.get("TELEOP_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"]
    for name in filter(None, candidates):
        path = shutil.which(name)
        if path:
            return path
    return None


def screenshot(chromium: str, url: str, path, profile, run_ms: int = 4000) -> np.ndarray:
    """Load ``url`` headless, let the page run ``run_ms``, save a PNG and return it (BGR)."""
    import cv2

    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--force-color-profile=srgb", "--no-first-run", f"--user-data-dir={profile}",
               "--window-size=1400,900", f"--timeout={run_ms}", f"--screenshot={path}", url]
    # --timeout stops loading after run_ms and then takes the screenshot (the MJPEG stream
    # never finishes loading, so there is no "load complete" to wait for).
    subprocess.run(command, capture_output=True, timeout=90, check=False)
    image = cv2.imread(str(path))
    assert image is not None and image.size > 0, f"chromium wrote no screenshot at {path}"
    return image


def canvas_region(image: np.ndarray) -> np.ndarray:
    """The robot-view canvas: the rows and columns mostly made of its background colour
    (a colour nothing else on the page uses; a few stray pixels elsewhere do not count)."""
    mask = np.all(np.abs(image.astype(int) - CANVAS_BACKGROUND) <= 2, axis=2)
    rows = np.flatnonzero(mask.sum(axis=1) > 0.3 * 640)
    cols = np.flatnonzero(mask.sum(axis=0) > 0.3 * 480)
    assert rows.size > 0.8 * 480 and cols.size > 0.8 * 640, "robot-view canvas not found in the screenshot"
    return image[rows.min():rows.max() + 1, cols.min():cols.max() + 1]


def colour_counts(region: np.ndarray) -> dict[str, int]:
    import cv2

    hsv = cv2.cvtColor(region, cv2.COLOR_BGR2HSV)
    strong = (hsv[..., 1] > 100) & (hsv[..., 2] > 60)
    return {name: int(np.sum(strong & (hsv[..., 0] >= lo) & (hsv[..., 0] <= hi))) for name, (lo, hi) in HUES.items()}


def render_view(chromium: str, url: str, path, profile) -> tuple[np.ndarray, dict[str, int]]:
    """Screenshot the page and return (canvas region, colour counts). A loaded machine can
    start Chromium slowly: if a pose colour is missing, retry once with a longer run."""
    for run_ms in (4000, 12000):
        try:
            region = canvas_region(screenshot(chromium, url, path, profile, run_ms))
        except AssertionError:
            if run_ms == 12000:
                raise
            continue       # not laid out yet: the longer run
        counts = colour_counts(region)
        if all(count > 150 for count in counts.values()):
            break
    return region, counts


def test_headless_chromium_draws_three_poses(robot, view, tmp_path):
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("chromium not found (apt-get install chromium, or set TELEOP_CHROMIUM): browser test skipped")
    from teleop.video.codec import JpegCodec
    from teleop.video.sources import SyntheticSceneSource

    # Three clearly different poses: the ghost reaches forward with the left arm, the
    # prediction half-way, the measured robot still at home.
    ghost_q = posed(robot, l_shoulder_pitch=-1.3, l_elbow=0.4, r_shoulder_roll=0.9)
    scene = {"refs": references_from_configuration(robot, ghost_q, t=1.0),
             "actual": robot.home_configuration(),
             "predicted": posed(robot, l_shoulder_pitch=-0.7, torso_pitch=0.25)}
    viewer = VideoWebViewer(port=0, streams=("left",), stats_provider=lambda: {"test": {"scene": 1}},
                            robot_pose_provider=lambda: view.document(scene["refs"], scene["actual"],
                                                                      scene["predicted"]))
    with viewer:
        viewer.publish_jpeg("left", JpegCodec().encode(SyntheticSceneSource(320, 240).render(0)))
        viewer.robot_pose_provider()  # warm the ghost solver up before the browser asks
        region, counts = render_view(chromium, viewer.url, tmp_path / "first.png", tmp_path / "profile")
        assert abs(region.shape[0] - 480) <= 4 and abs(region.shape[1] - 640) <= 4, region.shape
        assert all(count > 150 for count in counts.values()), counts

        # Another pose: the image changes.
        scene["actual"] = posed(robot, r_shoulder_pitch=-1.4, torso_yaw=0.5)
        scene["refs"] = references_from_configuration(robot, posed(robot, r_shoulder_pitch=-1.2), t=2.0)
        region2, counts2 = render_view(chromium, viewer.url, tmp_path / "second.png", tmp_path / "profile")
    assert all(count > 150 for count in counts2.values()), counts2
    assert region2.shape == region.shape
    changed = np.any(np.abs(region2.astype(int) - region.astype(int)) > 40, axis=2)
    assert changed.mean() > 0.005, f"only {changed.mean():.4f} of the view changed"
