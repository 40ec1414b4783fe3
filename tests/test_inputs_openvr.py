"""OpenVR input: conversion at the interface with generated device data, buttons, clear errors.

The hardware API is replaced by a small fake of the ``openvr`` module's surface (constants
with the values openvr defines, ``init``/``shutdown``, IVRSystem's pose, class, property
and controller-state calls); everything of ours runs for real. The "no runtime" test runs
the real openvr package's VR_Init when it is installed.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest

from retarget import quat, skeleton
from teleop.inputs.base import GatedSource, InputEvent, PoseSource, drain_events
from teleop.inputs.openvr_input import (
    OpenVRConfig,
    OpenVRSource,
    OpenVRUnavailable,
    matrix34_to_pose,
)
from teleop.inputs.synthetic import generate

# OpenVR's z-up conversion written out independently of the code under test:
# OpenVR (x right, y up, -z forward) -> ours (x forward, y left, z up).
TO_VR = np.array([[0.0, -1.0, 0.0], [0.0, 0.0, 1.0], [-1.0, 0.0, 0.0]])   # ours -> OpenVR


class FakeInitError(Exception):
    pass


def make_fake_openvr(devices: list[dict] | None, frame: list[int]):
    """A stand-in for the ``openvr`` module (values from openvr.h / pyopenvr).

    ``devices``: per device index {"class", "role", "serial", "type", "poses": [(R (3,3), p (3,))
    per frame in OpenVR axes], "buttons": [mask per frame]}; None: no runtime (init raises).
    ``frame``: one-element list, the current frame index the fake reports.
    """
    class System:
        def getTrackedDeviceClass(self, i):
            return devices[i]["class"] if i < len(devices) else 0

        def getControllerRoleForTrackedDeviceIndex(self, i):
            return devices[i].get("role", 0)

        def getStringTrackedDeviceProperty(self, i, prop):
            return {1002: devices[i].get("serial", ""), 7000: devices[i].get("type", "")}[prop]

        def getFloatTrackedDeviceProperty(self, i, prop):
            assert prop == 2002
            return 90.0

        def getDeviceToAbsoluteTrackingPose(self, universe, seconds, count):
            assert universe == 1 and count == 64
            out = []
            for i in range(count):
                if i >= len(devices):
                    out.append(SimpleNamespace(bPoseIsValid=False, bDeviceIsConnected=False,
                                               mDeviceToAbsoluteTracking=SimpleNamespace(m=[[0] * 4] * 3)))
                    continue
                r, p = devices[i]["poses"][frame[0]]
                m = [[float(r[a, 0]), float(r[a, 1]), float(r[a, 2]), float(p[a])] for a in range(3)]   # HmdMatrix34
                # "lost": frames in which the device is gone (battery, occlusion)
                here = frame[0] not in devices[i].get("lost", ())
                out.append(SimpleNamespace(bPoseIsValid=here, bDeviceIsConnected=here,
                                           mDeviceToAbsoluteTracking=SimpleNamespace(m=m)))
            return out

        def getControllerState(self, i):
            return True, SimpleNamespace(ulButtonPressed=devices[i].get("buttons", [0] * 10_000)[frame[0]])

    calls = {"shutdown": 0}

    def init(application_type):
        if devices is None:
            raise FakeInitError("VRInitError_Init_PathRegistryNotFound")
        return System()

    def shutdown():
        calls["shutdown"] += 1

    return SimpleNamespace(
        VRApplication_Other=0, VRApplication_Overlay=2, TrackingUniverseStanding=1, k_unMaxTrackedDeviceCount=64,
        TrackedDeviceClass_HMD=1, TrackedDeviceClass_Controller=2, TrackedDeviceClass_GenericTracker=3,
        TrackedControllerRole_LeftHand=1, TrackedControllerRole_RightHand=2,
        Prop_SerialNumber_String=1002, Prop_ControllerType_String=7000, Prop_DisplayFrequency_Float=2002,
        error_code=SimpleNamespace(OpenVRError=FakeInitError), init=init, shutdown=shutdown, calls=calls)


def test_the_fake_uses_the_values_openvr_defines():
    openvr = pytest.importorskip("openvr", reason="openvr not installed (pip install 'prescient-teleop[vr]')")
    fake = make_fake_openvr([], [0])
    for name in ("VRApplication_Other", "VRApplication_Overlay", "TrackingUniverseStanding",
                 "k_unMaxTrackedDeviceCount",
                 "TrackedDeviceClass_HMD", "TrackedDeviceClass_Controller", "TrackedDeviceClass_GenericTracker",
                 "TrackedControllerRole_LeftHand", "TrackedControllerRole_RightHand", "Prop_SerialNumber_String",
                 "Prop_ControllerType_String", "Prop_DisplayFrequency_Float"):
        assert getattr(fake, name) == getattr(openvr, name), name
    for button, value in (("k_EButton_ApplicationMenu", 1), ("k_EButton_Grip", 2), ("k_EButton_SteamVR_Touchpad", 32),
                          ("k_EButton_SteamVR_Trigger", 33)):
        assert getattr(openvr, button) == value


# ----------------------------------------------------------------- generated devices
SEGMENT_DEVICES = {  # segment -> device description (class, role / serial / tracker type)
    "head": {"class": 1},
    "left_hand": {"class": 2, "role": 1},
    "right_hand": {"class": 2, "role": 2},
    "pelvis": {"class": 3, "serial": "LHR-0001", "type": "vive_tracker_waist"},
    "left_foot": {"class": 3, "serial": "LHR-0002", "type": ""},                  # by serial (config)
    "right_foot": {"class": 3, "serial": "LHR-0003", "type": "vive_tracker_right_foot"},
    "right_forearm": {"class": 3, "serial": "LHR-0004", "type": "vive_tracker_right_elbow"},
}
WORLD_YAW = 0.6     # the play area's forward is not the operator's [rad]


@pytest.fixture(scope="module")
def motion():
    return generate("reach_forward", seed=3, rate_hz=90.0)


def _devices_from(motion, n_frames, buttons=None, extra_rotation=None):
    """OpenVR devices carrying ``motion``'s segments through arbitrary device mountings."""
    rng = np.random.default_rng(1)
    world = quat.about_z(WORLD_YAW)
    q_to_vr = quat.from_matrix(TO_VR)
    devices = []
    for segment, desc in SEGMENT_DEVICES.items():
        mount = quat.normalize(rng.normal(size=4))           # how the device sits on the body
        s = motion.index(segment)
        poses = []
        for k in range(n_frames):
            q_seg = motion.orientations[k, s]
            if extra_rotation and segment in extra_rotation:
                q_seg = extra_rotation[segment]
            q_dev = quat.mul(q_to_vr, quat.mul(world, quat.mul(q_seg, mount)))
            p = TO_VR @ quat.rotate(world, motion.positions[k, s])
            poses.append((quat.to_matrix(q_dev), p))
        devices.append({**desc, "poses": poses, "buttons": (buttons or {}).get(segment, [0] * n_frames)})
    devices.append({"class": 3, "serial": "LHR-9999", "type": "vive_tracker_camera", "poses": devices[0]["poses"]})
    devices.append({"class": 4, "poses": devices[0]["poses"]})                # a base station: ignored
    return devices


def test_matrix34_conversion_changes_only_the_world_axes():
    r = quat.to_matrix(quat.about_y(0.3))                       # OpenVR: a pitch about its y (up) axis
    position, q = matrix34_to_pose([[*r[0], 0.1], [*r[1], 1.6], [*r[2], -0.5]])
    assert np.allclose(position, [0.5, -0.1, 1.6])               # 0.5 m forward, 0.1 m right, 1.6 m up
    # The device frame is kept (the calibration deals with it), seen from our world: its
    # up axis (OpenVR y) is our z, its forward (-z) is yawed by +0.3 rad (to the left) from +x.
    rotation = quat.to_matrix(q)
    assert np.allclose(rotation @ [0, 1.0, 0], [0, 0, 1])
    assert np.allclose(rotation @ [0, 0, -1.0], [np.cos(0.3), np.sin(0.3), 0])


def test_devices_become_segment_poses_after_an_npose_calibration(motion):
    n = 60
    frame = [0]
    touchpad = [1 << 32] + [0] * (n - 1)                         # left touchpad pressed at frame 0
    fake = make_fake_openvr(_devices_from(motion, n, {"left_hand": touchpad}), frame)
    config = OpenVRConfig(trackers={"LHR-0002": "left_foot"})
    source = OpenVRSource(config, openvr_module=fake, clock=lambda: 0.0)
    assert isinstance(source, PoseSource) and source.rate_hz == 90.0
    first = source.poll(0.0)
    assert source.calibration_pose == "npose"
    assert [e.kind for e in source.events()] == [InputEvent.CALIBRATE_NPOSE]
    assert set(first[1]) == set(SEGMENT_DEVICES)
    assert source.unassigned == ["LHR-9999 (vive_tracker_camera)"]
    # Expected: the motion with its initial heading removed, orientations relative to the
    # calibration frame (the N-pose is taken as identity).
    s_l, s_r = motion.index("left_hand"), motion.index("right_hand")
    heading = skeleton.heading_from_lines([motion.positions[0, s_l]], [motion.positions[0, s_r]])
    turn = quat.about_z(-heading)
    worst_p, worst_q = 0.0, 0.0
    for k in range(1, n):
        frame[0] = k
        t, pose = source.poll(k / 90.0)
        assert t == pytest.approx(k / 90.0)
        for segment, (p, q) in pose.items():
            s = motion.index(segment)
            expected_p = quat.rotate(turn, motion.positions[k, s])
            expected_q = quat.mul(turn, quat.mul(quat.mul(motion.orientations[k, s],
                                                          quat.conj(motion.orientations[0, s])),
                                                 quat.conj(turn)))
            worst_p = max(worst_p, float(np.abs(p - expected_p).max()))
            worst_q = max(worst_q,
                          float(2 * np.arccos(min(1.0, abs(np.dot(q, expected_q) / np.linalg.norm(expected_q))))))
    assert worst_p < 1e-9 and worst_q < 1e-6
    # Between two display periods nothing new is produced.
    assert source.poll((n - 1) / 90.0 + 0.001) is None


def test_no_frame_before_calibration_and_tpose_calibration(motion):
    frame = [0]
    tpose = {"left_hand": quat.about_x(np.pi / 2), "right_hand": quat.about_x(-np.pi / 2),
             "right_forearm": quat.about_x(-np.pi / 2)}
    fake = make_fake_openvr(_devices_from(motion, 3, extra_rotation=tpose), frame)
    source = OpenVRSource(openvr_module=fake)
    assert source.poll(0.0) is None                              # not calibrated: nothing to send
    source.calibrate("tpose")
    _, pose = source.poll(1.0)
    for segment, expected in tpose.items():
        q = pose[segment][1]
        assert abs(np.dot(q, expected)) == pytest.approx(1.0, abs=1e-9), segment
    with pytest.raises(ValueError, match="npose"):
        source.calibrate("apose")


def test_buttons_become_station_events_on_rising_edges_and_gate_the_source(motion):
    n = 8
    frame = [0]
    right = [0, 1 << 1, 1 << 1, 0, 1 << 2, 0, 0, 0]          # menu pressed (held 2 frames), then grip
    left = [1 << 32, 0, 0, 0, 0, 0, 1 << 2, 0]                 # calibrate at 0, grip (e-stop) at 6
    fake = make_fake_openvr(_devices_from(motion, n, {"right_hand": right, "left_hand": left}), frame)
    seen = []
    gated = GatedSource(OpenVRSource(openvr_module=fake), on_event=seen.append)
    sent = []
    for k in range(n):
        frame[0] = k
        sent.append(gated.poll(k / 90.0) is not None)
    assert [(e.kind, round(e.t * 90)) for e in seen] == [
        (InputEvent.CALIBRATE_NPOSE, 0), (InputEvent.RECORD_TOGGLE, 1), (InputEvent.PAUSE_TOGGLE, 4),
        (InputEvent.EMERGENCY_STOP, 6)]
    assert seen[1].device == "right_controller"
    # Paused from frame 4 on, then stopped for good at 6.
    assert sent == [True, True, True, True, False, False, False, False]
    assert drain_events(gated.source) == []
    gated.close()
    assert fake.calls["shutdown"] == 1


def test_bad_configs_are_refused_with_the_reason(tmp_path):
    with pytest.raises(ValueError, match="unknown segments"):
        OpenVRConfig(trackers={"LHR-1": "tail"})
    with pytest.raises(ValueError, match="button"):
        OpenVRConfig(buttons={"left_jump": "record_toggle"})
    path = tmp_path / "vr.json"
    path.write_text('{"trackers": {"LHR-7": "pelvis"}, "colour": 1}')
    with pytest.raises(ValueError, match="unknown OpenVR config keys"):
        OpenVRConfig.load(path)
    path.write_text('{"trackers": {"LHR-7": "pelvis"}}')
    assert OpenVRConfig.load(path).trackers == {"LHR-7": "pelvis"}


@pytest.mark.parametrize("data", [
    b'{"rate_hz": 1' + b"0" * 400 + b"}",
    b'{"rate_hz": 1e999}',
    b'{"rate_hz": NaN}',
    b'{"rate_hz": "90"}',
    b'{"trackers": ' + b"[" * 100000 + b"]" * 100000 + b"}",
    b'{"rate_hz": ' + b"9" * 5000 + b"}",
    b'{"trackers": {"caf\xe9": "pelvis"}}',
], ids=["400-digit-rate", "inf-rate", "nan-rate", "string-rate", "deep", "5000-digit-int", "latin1"])
def test_hostile_config_file_is_a_value_error_naming_the_file(tmp_path, data):
    """The 400-digit rate used to escape as TypeError, the nesting as RecursionError."""
    path = tmp_path / "vr.json"
    path.write_bytes(data)
    with pytest.raises(ValueError) as err:
        OpenVRConfig.load(path)
    assert type(err.value) is ValueError and "vr.json" in str(err.value) and "\n" not in str(err.value)


# --------------------------------------------------------------------- clear errors
def test_no_runtime_gives_a_clear_error_with_the_fake():
    with pytest.raises(OpenVRUnavailable, match="SteamVR is not running"):
        OpenVRSource(openvr_module=make_fake_openvr(None, [0]))


def test_no_runtime_gives_a_clear_error_with_the_real_openvr(capfd):
    pytest.importorskip("openvr", reason="openvr not installed (pip install 'prescient-teleop[vr]')")
    with pytest.raises(OpenVRUnavailable, match="SteamVR is not running.*InitError"):
        OpenVRSource()
    # openvr's own "Unable to read VR Path Registry from ..." (descriptor 2) is not printed
    # ahead of our error, which says it.
    assert "VR Path Registry" not in capfd.readouterr().err


def test_missing_package_gives_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvr", None)               # import openvr -> ImportError
    with pytest.raises(OpenVRUnavailable, match=r"pip install 'prescient-teleop\[vr\]'"):
        OpenVRSource()


# ------------------------------------------------------------------- headset display
class FakeOverlay:
    """IVROverlay's calls used by the headset display, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.pixels: list[tuple[int, int, bytes]] = []
        self.flags: dict[int, bool] = {}
        self.width_m = None

    def createOverlay(self, key, name):
        self.calls.append(("create", key, name))
        return 7

    def setOverlayWidthInMeters(self, handle, width):
        self.width_m = width

    def setOverlayTransformTrackedDeviceRelative(self, handle, device, transform):
        self.calls.append(("transform", device, [list(row) for row in transform.m]))

    def showOverlay(self, handle):
        self.calls.append(("show", handle))

    def setOverlayFlag(self, handle, flag, enabled):
        self.flags[flag] = enabled

    def setOverlayRaw(self, handle, buffer, width, height, bytes_per_pixel):
        assert handle == 7 and bytes_per_pixel == 4
        self.pixels.append((width, height, bytes(buffer)))

    def destroyOverlay(self, handle):
        self.calls.append(("destroy", handle))


def make_fake_overlay_openvr(runtime: bool = True):
    fake = make_fake_openvr([] if runtime else None, [0])
    overlay = FakeOverlay()
    fake.VROverlay = lambda: overlay
    fake.HmdMatrix34_t = lambda: SimpleNamespace(m=[[0.0] * 4 for _ in range(3)])
    fake.k_unTrackedDeviceIndex_Hmd = 0
    fake.VROverlayFlags_SideBySide_Parallel = 1024
    return fake, overlay


def test_headset_display_mono_then_stereo_side_by_side():
    import cv2

    from teleop.video.openvr_display import HeadsetDisplay

    fake, overlay = make_fake_overlay_openvr()
    now = [0.0]
    display = HeadsetDisplay(distance_m=1.5, width_m=1.2, clock=lambda: now[0], openvr_module=fake)
    assert ("transform", 0, [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, -1.5]]) in overlay.calls   # head-locked, 1.5 m ahead
    left = np.zeros((240, 320, 3), np.uint8)
    left[..., 2] = 255                                             # BGR red
    right = np.zeros((240, 320, 3), np.uint8)
    right[..., 0] = 255                                            # BGR blue
    ok, jpeg = cv2.imencode(".jpg", left)
    display.show_jpeg("left", jpeg.tobytes())                      # one camera: mono
    width, height, data = overlay.pixels[-1]
    assert (width, height) == (320, 240) and not display.stereo
    rgba = np.frombuffer(data, np.uint8).reshape(240, 320, 4)
    assert rgba[..., 0].mean() > 240 and rgba[..., 2].mean() < 15 and np.all(rgba[..., 3] == 255)   # RGBA red
    assert overlay.flags == {1024: False} and overlay.width_m == 1.2
    display.show("right", right)                                   # both cameras: side by side, flagged
    width, height, data = overlay.pixels[-1]
    assert (width, height) == (640, 240) and display.stereo
    rgba = np.frombuffer(data, np.uint8).reshape(240, 640, 4)
    assert rgba[:, :320, 0].min() >= 250 and rgba[:, 320:, 2].min() == 255      # left (from JPEG) | right
    assert overlay.flags == {1024: True} and overlay.width_m == 2.4
    now[0] = 1.0                                                   # the right camera went quiet: mono again
    display.show("left", left)
    assert overlay.pixels[-1][:2] == (320, 240) and overlay.flags == {1024: False}
    display.show_jpeg("left", b"not a jpeg")                       # damaged frame: skipped, counted
    assert display.decode_errors == 1 and len(overlay.pixels) == 3
    with pytest.raises(ValueError, match="BGR uint8"):
        display.show("left", np.zeros((4, 4), np.uint8))
    display.close()
    assert ("destroy", 7) in overlay.calls and fake.calls["shutdown"] == 1


def test_headset_display_shows_a_right_only_stream():
    """Only the right eye camera streams (or the left one stopped): the right image is shown
    mono. Before, right frames waited forever for a left one and the headset stayed blank."""
    from teleop.video.openvr_display import HeadsetDisplay

    fake, overlay = make_fake_overlay_openvr()
    now = [0.0]
    display = HeadsetDisplay(clock=lambda: now[0], openvr_module=fake)
    right = np.zeros((240, 320, 3), np.uint8)
    right[..., 0] = 255                                            # BGR blue
    display.show("right", right)
    width, height, data = overlay.pixels[-1]
    assert (width, height) == (320, 240) and not display.stereo
    assert np.frombuffer(data, np.uint8).reshape(240, 320, 4)[..., 2].min() == 255   # RGBA blue
    display.show("left", np.zeros((240, 320, 3), np.uint8))        # the left camera joins: stereo
    assert overlay.pixels[-1][:2] == (640, 240) and display.stereo
    now[0] = 1.0                                                   # the left camera stops: mono right
    display.show("right", right)
    assert overlay.pixels[-1][:2] == (320, 240) and not display.stereo
    # A forged header declaring 20000 x 20000 px is refused before OpenCV allocates it.
    from teleop.video.codec import JpegCodec

    forged = bytearray(JpegCodec().encode(np.zeros((8, 8, 3), np.uint8)))
    sof = forged.find(b"\xff\xc0")
    forged[sof + 5:sof + 9] = (20000).to_bytes(2, "big") * 2
    shown = len(overlay.pixels)
    display.show_jpeg("left", bytes(forged))
    assert display.decode_errors == 1 and len(overlay.pixels) == shown
    display.close()


def test_headset_display_without_runtime_is_a_clear_error_and_the_web_viewer_still_works():
    from teleop.video.openvr_display import HeadsetDisplay
    from teleop.video.web import VideoWebViewer

    fake, _ = make_fake_overlay_openvr(runtime=False)
    with pytest.raises(OpenVRUnavailable, match="SteamVR is not running"):
        HeadsetDisplay(openvr_module=fake)
    if _openvr_installed():
        with pytest.raises(OpenVRUnavailable, match="SteamVR is not running"):
            HeadsetDisplay()                                       # the real VR_Init, no runtime here
    viewer = VideoWebViewer(port=0).start()
    try:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{viewer.port}/", timeout=10) as response:
            assert response.status == 200
    finally:
        viewer.stop()


def _openvr_installed() -> bool:
    try:
        import openvr  # noqa: F401
    except ImportError:
        return False
    return True


def test_a_lost_device_holds_the_robot_instead_of_making_the_hands_jump():
    """The right controller is lost for 20 frames: the station sends nothing meanwhile (the
    robot's watchdog holds), says which segment is missing, and resumes with the references
    of an operator who never lost it. Before, the right hand's target jumped 16 cm back to
    its start."""
    from teleop.clock import VirtualClock
    from teleop.net.delay import LinkModel
    from teleop.net.protocol import PacketCodec
    from teleop.net.virtual import connect_virtual
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.stations.operator_station import OperatorStation

    motion = generate("reach_forward", seed=3, rate_hz=90.0)
    n, gap = 200, range(150, 170)

    def run(lost):
        devices = _devices_from(motion, n, {"left_hand": [1 << 32] + [0] * (n - 1)})   # calibrate at frame 0
        right = next(i for i, d in enumerate(devices) if d.get("role") == 2)
        devices[right]["lost"] = set(lost)
        frame = [0]
        clock = VirtualClock(0.0)
        operator_ep, robot_ep = connect_virtual(PacketCodec(b"k" * 32), LinkModel.thesis(0.0), clock, seed=1)
        source = OpenVRSource(OpenVRConfig(trackers={"LHR-0002": "left_foot"}),
                              openvr_module=make_fake_openvr(devices, frame))
        station = OperatorStation(operator_ep, robot_ep.address, source, robot_target(RobotModel()))
        sent, missing = [], set()
        try:
            for k in range(n):
                frame[0] = k
                clock.set(k / 90.0)
                refs = station.tick()
                sent.append(None if refs is None else refs.to_flat())
                missing.update(station.missing_segments)
        finally:
            source.close()
        return sent, missing, station

    tracked, _, _ = run(())
    sent, missing, station = run(gap)
    assert all(sent[k] is None for k in gap) and station.incomplete_poses == len(gap)
    assert missing == {"right_hand"} and station.missing_segments == ()
    for k in (gap[0] - 1, gap[-1] + 1, n - 1):
        np.testing.assert_allclose(sent[k], tracked[k], atol=1e-12)


def test_a_calibration_that_fails_or_leaves_a_tracker_out_is_reported(motion):
    """A calibrate press while the headset was not tracked did nothing, and a tracker occluded
    at that moment was left out for the session, both without a word (only a counter)."""
    from teleop.stations.recording import input_event_handler

    touchpad = [1 << 32, 0, 1 << 32, 0]                           # calibrate at frames 0 and 2
    devices = _devices_from(motion, 4, {"left_hand": touchpad})
    devices[0]["lost"] = (0,)                                      # the headset, at the first press
    devices[3]["lost"] = (2,)                                      # the pelvis tracker, at the second
    frame = [0]
    source = OpenVRSource(OpenVRConfig(trackers={"LHR-0002": "left_foot"}),
                          openvr_module=make_fake_openvr(devices, frame), clock=lambda: 0.0)
    logged = []
    handle = input_event_handler(SimpleNamespace(recalibrate=lambda: None), log=logged.append)
    for k in range(4):
        frame[0] = k
        source.poll(k / 90.0)
        for event in source.events():
            handle(event)
    problems = [m for m in logged if m.startswith("calibration:")]
    assert len(problems) == 2, logged
    assert "head" in problems[0] and "press calibrate again" in problems[0]
    assert "without pelvis" in problems[1]
    assert source.calibration_failures == 1 and source.calibration_pose == "npose"
