"""OpenVR / SteamVR as a :class:`~teleop.inputs.base.PoseSource`: headset, controllers, trackers.

Needs the ``openvr`` package (``pip install 'prescient-teleop[vr]'``) and a running SteamVR
with a headset; without them :class:`OpenVRSource` raises :class:`OpenVRUnavailable`
with a message saying which of the two is missing.

Devices -> segments
    the headset -> ``head``; controllers -> ``left_hand`` / ``right_hand`` by the role
    SteamVR gives them; generic trackers -> a segment by **serial number** (config
    ``trackers``) or else by the **role** set in SteamVR's "Manage Trackers" (read from
    the device's ``Prop_ControllerType_String``, e.g. ``vive_tracker_waist``; config
    ``roles``): waist -> ``pelvis``, feet -> ``left_foot`` / ``right_foot``, elbows ->
    ``left_forearm`` / ``right_forearm`` (a forearm segment's origin is the elbow).
    Unassigned trackers are ignored (and listed in :attr:`OpenVRSource.unassigned`).

Axes and frames
    OpenVR's standing universe is x right, y up, -z forward, metres, floor at y = 0; the
    product's is x forward, y left, z up: (x, y, z) -> (-z, -x, y) (the matrix
    :data:`retarget.readers.vr_trackers.OPENVR_TO_Z_UP`). A device's own frame is
    arbitrary (how a tracker is strapped on), so a **calibration** is needed: the operator
    stands in the N-pose (or the T-pose) facing forward and presses the calibrate button;
    the source then (1) turns the world about z so the operator faces +x (forward is
    perpendicular to the right->left controller line) and (2) stores per device the
    constant rotation that makes its orientation the segment's expected one in that pose
    (identity in the N-pose; the hands and forearms are turned by +-90 degrees about x in
    the T-pose). No frame is produced before the first calibration.

Rate
    ``poll`` reads every device's newest pose at most once per headset display period
    (``Prop_DisplayFrequency_Float``, typically 90 Hz): the device rate as the application
    sees it. The frame time is the caller's ``now``.

Buttons (controller state, rising edges) -> :class:`~teleop.inputs.base.StationEvent`,
read with ``events()``; the bindings are in :class:`OpenVRConfig` (defaults: left touchpad
click = calibrate N-pose, left menu = calibrate T-pose, right menu = start/stop recording,
right grip = pause (clutch), left grip = emergency stop).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from retarget import quat, skeleton
from retarget.readers.vr_trackers import OPENVR_TO_Z_UP
from teleop import json_input
from teleop.native_stderr import native_stderr_silenced
from teleop.inputs.base import Frame, InputEvent, StationEvent

#: SteamVR tracker role (from Prop_ControllerType_String) -> segment.
DEFAULT_ROLES: dict[str, str] = {
    "vive_tracker_waist": "pelvis",
    "vive_tracker_left_foot": "left_foot", "vive_tracker_right_foot": "right_foot",
    "vive_tracker_left_elbow": "left_forearm", "vive_tracker_right_elbow": "right_forearm",
}
#: Button names (OpenVR's EVRButtonId values) usable in bindings.
BUTTON_IDS: dict[str, int] = {"system": 0, "menu": 1, "grip": 2, "a": 7, "touchpad": 32, "trigger": 33}
#: "<hand>_<button>" -> event.
DEFAULT_BUTTONS: dict[str, str] = {
    "left_touchpad": "calibrate_npose", "left_menu": "calibrate_tpose", "right_menu": "record_toggle",
    "right_grip": "pause_toggle", "left_grip": "emergency_stop",
}

# Expected segment orientation (N-pose-aligned frames) when the operator holds the T-pose:
# the left arm turns -z -> +y (+90 degrees about x), the right arm -z -> -y (-90 degrees).
_TPOSE_EXPECTED = {"left_hand": quat.about_x(np.pi / 2), "left_forearm": quat.about_x(np.pi / 2),
                   "right_hand": quat.about_x(-np.pi / 2), "right_forearm": quat.about_x(-np.pi / 2)}
_Q_OPENVR_TO_Z_UP = quat.from_matrix(OPENVR_TO_Z_UP)


class OpenVRUnavailable(RuntimeError):
    """The openvr package is missing or SteamVR / a headset is not running."""


def import_openvr():
    """The ``openvr`` module, or :class:`OpenVRUnavailable` saying how to install it."""
    try:
        import openvr
    except ImportError as exc:
        raise OpenVRUnavailable("the 'openvr' package is not installed: pip install 'prescient-teleop[vr]' "
                                f"(or pip install openvr) -- {exc}") from None
    return openvr


def init_openvr(openvr, application_type):
    """``openvr.init`` with a clear error when SteamVR is not running (returns IVRSystem)."""
    try:
        # openvr's library prints why on stderr ("Unable to read VR Path Registry from ..."),
        # ahead of the error below, which says it for the user.
        with native_stderr_silenced():
            return openvr.init(application_type)
    except Exception as exc:  # openvr raises openvr.error_code.InitError_* subclasses
        if not isinstance(exc, getattr(getattr(openvr, "error_code", None), "OpenVRError", Exception)):
            raise
        raise OpenVRUnavailable(
            f"SteamVR is not running or no headset is connected: VR_Init failed with {type(exc).__name__} "
            "(start SteamVR and check that the headset is tracked; without VR use --input synthetic or a "
            "file, and --view web)") from None


@dataclass
class OpenVRConfig:
    """Device assignment and button bindings.

    Attributes:
        trackers: tracker serial number -> segment (wins over the role).
        roles: SteamVR tracker role (``vive_tracker_*``) -> segment.
        buttons: ``"<left|right>_<button>"`` (button in :data:`BUTTON_IDS`) -> event name
            (:class:`~teleop.inputs.base.InputEvent` values).
        rate_hz: frame rate when the headset does not report its display frequency [Hz].
    """

    trackers: dict[str, str] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ROLES))
    buttons: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_BUTTONS))
    rate_hz: float = 90.0

    def __post_init__(self) -> None:
        from retarget.human import SEGMENTS

        # Checked here, not where used: a JSON file with a list for a mapping, or a rate of
        # 0 / "90", would otherwise pass and crash the station later (the rate only when the
        # headset does not report its display frequency, i.e. on some set-ups only).
        for what, mapping in (("trackers", self.trackers), ("roles", self.roles), ("buttons", self.buttons)):
            if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                        for k, v in mapping.items()):
                raise ValueError(f"OpenVR config {what}: expected an object of names -> names, got {mapping!r}")
        rate: float | None = self.rate_hz
        try:
            rate = json_input.finite_float(rate, "rate_hz")   # refuses bools, strings, inf, 10**400
        except ValueError:
            rate = None
        if rate is None or rate <= 0:
            raise ValueError(f"OpenVR config rate_hz: expected a frame rate > 0 [Hz], got {self.rate_hz!r:.40}")
        self.rate_hz = rate
        for what, mapping in (("trackers", self.trackers), ("roles", self.roles)):
            bad = {k: v for k, v in mapping.items() if v not in SEGMENTS}
            if bad:
                raise ValueError(f"OpenVR config {what}: unknown segments {bad} (known: {', '.join(SEGMENTS)})")
        events = {e.value for e in InputEvent}
        for binding, event in self.buttons.items():
            hand, _, button = binding.partition("_")
            if hand not in ("left", "right") or button not in BUTTON_IDS or event not in events:
                raise ValueError(f"OpenVR config button {binding!r} -> {event!r}: expected "
                                 f"'<left|right>_<{'|'.join(BUTTON_IDS)}>' -> one of {sorted(events)}")

    @classmethod
    def load(cls, path) -> "OpenVRConfig":
        """Read a JSON file with any of the attributes as keys."""
        try:
            data = json_input.loads(Path(path).read_bytes())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: cannot read the OpenVR config: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: the OpenVR config must be a JSON object, got {type(data).__name__}")
        unknown = set(data) - {"trackers", "roles", "buttons", "rate_hz"}
        if unknown:
            raise ValueError(f"{path}: unknown OpenVR config keys {sorted(unknown)}")
        try:
            return cls(**data)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None


def matrix34_to_pose(m) -> tuple[np.ndarray, np.ndarray]:
    """An OpenVR HmdMatrix34 (3 rows x 4: rotation | translation [m]) -> z-up (position (3,), quaternion (4,)).

    The rotation is the device frame in the OpenVR world; only the world axes are changed
    here (the device frame is dealt with by the calibration).
    """
    a = np.array([[float(m[i][j]) for j in range(4)] for i in range(3)])
    position = OPENVR_TO_Z_UP @ a[:, 3]
    q = quat.mul(_Q_OPENVR_TO_Z_UP, quat.from_matrix(a[:, :3]))
    return position, quat.normalize(q)


class OpenVRSource:
    """SteamVR devices as a pose source (see the module docstring).

    Args:
        config: device assignment and buttons (default :class:`OpenVRConfig`).
        clock: the caller's clock [s].
        openvr_module: the ``openvr`` module (default: imported; tests pass a fake of its API).
    """

    def __init__(self, config: OpenVRConfig | None = None, *, clock: Callable[[], float] = time.monotonic,
                 openvr_module=None) -> None:
        self.config = config or OpenVRConfig()
        self._clock = clock
        self.vr = openvr_module or import_openvr()
        self.system = init_openvr(self.vr, self.vr.VRApplication_Other)
        vr = self.vr
        self._universe = vr.TrackingUniverseStanding
        self._buttons = [(hand, 1 << BUTTON_IDS[button], InputEvent(event))
                         for binding, event in self.config.buttons.items()
                         for hand, _, button in [binding.partition("_")]]
        try:
            rate = float(self.system.getFloatTrackedDeviceProperty(0, vr.Prop_DisplayFrequency_Float))
        except Exception:  # property missing on some drivers: the configured rate then
            rate = 0.0
        self.rate_hz = rate if rate > 0 else self.config.rate_hz
        self.devices: dict[str, int] = {}            # segment -> device index
        self.controllers: dict[str, int] = {}        # "left"/"right" -> device index
        self.unassigned: list[str] = []
        self._next_scan = -np.inf
        self._pressed: dict[int, int] = {}
        self._events: list[StationEvent] = []
        self._turn: np.ndarray | None = None         # world heading correction (4,)
        self._offsets: dict[str, np.ndarray] = {}    # segment -> device-to-segment rotation (4,)
        self._last_time = -np.inf
        self.calibration_pose: str | None = None
        self._calibrate_pending: str | None = None
        self.calibration_failures = 0

    # --------------------------------------------------------------- devices
    def scan_devices(self) -> None:
        """Map device indices to segments (called once a second: devices come and go)."""
        vr, system = self.vr, self.system
        devices, controllers, unassigned = {}, {}, []
        for index in range(vr.k_unMaxTrackedDeviceCount):
            kind = system.getTrackedDeviceClass(index)
            if kind == vr.TrackedDeviceClass_HMD:
                devices["head"] = index
            elif kind == vr.TrackedDeviceClass_Controller:
                role = system.getControllerRoleForTrackedDeviceIndex(index)
                side = {vr.TrackedControllerRole_LeftHand: "left",
                        vr.TrackedControllerRole_RightHand: "right"}.get(role)
                if side is not None:
                    controllers[side] = index
                    devices[f"{side}_hand"] = index
            elif kind == vr.TrackedDeviceClass_GenericTracker:
                serial = self._string(index, vr.Prop_SerialNumber_String)
                role = self._string(index, vr.Prop_ControllerType_String)
                segment = self.config.trackers.get(serial) or self.config.roles.get(role)
                if segment is None:
                    unassigned.append(f"{serial} ({role or 'no role'})")
                else:
                    devices[segment] = index
        self.devices, self.controllers, self.unassigned = devices, controllers, unassigned

    def _string(self, index: int, prop) -> str:
        try:
            return str(self.system.getStringTrackedDeviceProperty(index, prop))
        except Exception:  # openvr raises TrackedPropertyError for an unknown property
            return ""

    def _read_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Valid device poses in the z-up world, uncalibrated, by segment."""
        raw = self.system.getDeviceToAbsoluteTrackingPose(self._universe, 0, self.vr.k_unMaxTrackedDeviceCount)
        out = {}
        for segment, index in self.devices.items():
            pose = raw[index]
            if pose.bPoseIsValid and pose.bDeviceIsConnected:
                out[segment] = matrix34_to_pose(pose.mDeviceToAbsoluteTracking.m)
        return out

    def _read_buttons(self, now: float) -> None:
        for hand, index in self.controllers.items():
            ok, state = self.system.getControllerState(index)
            if not ok:
                continue
            pressed = int(state.ulButtonPressed)
            rising = pressed & ~self._pressed.get(index, 0)
            self._pressed[index] = pressed
            for bound_hand, mask, event in self._buttons:
                if bound_hand == hand and rising & mask:
                    self._events.append(StationEvent(event, now, f"{hand}_controller"))
                    if event in (InputEvent.CALIBRATE_NPOSE, InputEvent.CALIBRATE_TPOSE):
                        self._calibrate_pending = "npose" if event is InputEvent.CALIBRATE_NPOSE else "tpose"

    # ----------------------------------------------------------- calibration
    def calibrate(self, pose: str = "npose", poses: dict | None = None) -> None:
        """Calibrate on the current device poses, the operator standing in ``pose`` ("npose"/"tpose")."""
        if pose not in ("npose", "tpose"):
            raise ValueError(f"calibration pose must be 'npose' or 'tpose', got {pose!r}")
        poses = self._read_poses() if poses is None else poses
        missing = [s for s in ("head", "left_hand", "right_hand") if s not in poses]
        if missing:
            raise RuntimeError(f"cannot calibrate: no valid pose for {missing} (are the headset and both "
                               "controllers on and tracked?)")
        yaw = skeleton.heading_from_lines([poses["left_hand"][0]], [poses["right_hand"][0]])
        self._turn = quat.about_z(-float(yaw))
        expected = _TPOSE_EXPECTED if pose == "tpose" else {}
        self._offsets = {segment: quat.mul(quat.conj(quat.mul(self._turn, q)),
                                           expected.get(segment, np.array([1.0, 0, 0, 0])))
                         for segment, (_, q) in poses.items()}
        self.calibration_pose = pose

    # ------------------------------------------------------------- interface
    def poll(self, now: float | None = None) -> Frame | None:
        """The devices' newest poses as segment poses, at most once per display period."""
        now = self._clock() if now is None else float(now)
        if now >= self._next_scan:
            self.scan_devices()
            self._next_scan = now + 1.0
        self._read_buttons(now)
        if now - self._last_time < 1.0 / self.rate_hz - 1e-9:
            return None
        poses = self._read_poses()
        if self._calibrate_pending is not None:
            # Whatever goes wrong is said (a calibrate press that silently did nothing, or a
            # tracker left out for the session because it was occluded at that moment,
            # would only show later as a drifting or missing limb).
            try:
                self.calibrate(self._calibrate_pending, poses)
            except RuntimeError as exc:
                self.calibration_failures += 1       # devices not tracked: the operator presses again
                self._events.append(StationEvent(InputEvent.CALIBRATION_PROBLEM, now, "openvr",
                                                 f"{exc}; the previous calibration stays: press calibrate again"))
            else:
                untracked = sorted(set(self.devices) - set(poses))
                if untracked:
                    self._events.append(StationEvent(
                        InputEvent.CALIBRATION_PROBLEM, now, "openvr",
                        f"calibrated without {', '.join(untracked)} (not tracked now): left out until the next "
                        "calibration"))
            self._calibrate_pending = None
        if self._turn is None:
            return None
        frame = {}
        for segment, (position, q) in poses.items():
            if segment in self._offsets:
                frame[segment] = (quat.rotate(self._turn, position),
                                  quat.mul(quat.mul(self._turn, q), self._offsets[segment]))
        if not frame:
            return None
        self._last_time = now
        return now, frame

    def events(self) -> list[StationEvent]:
        """Button events since the last call."""
        events, self._events = self._events, []
        return events

    def close(self) -> None:
        if self.system is not None:
            self.system = None
            self.vr.shutdown()
