"""Every channel type survives a write/read round trip; the recorder's clock, drops and copies."""

import base64
import json

import numpy as np
import pytest
from mcap.reader import make_reader

from retarget.human import HumanMotion
from retarget.references import FLAT_SIZE, RobotReferences
from teleop.record import CameraFrame, Recorder, RobotStateSample, open_recording


class VirtualClock:
    """A settable clock in integer nanoseconds, as trials inject."""

    def __init__(self, t_ns: int = 5_000_000_000) -> None:
        self.t_ns = t_ns

    def __call__(self) -> int:
        return self.t_ns


def make_refs(t: float, offset: float = 0.0, extras: bool = False) -> RobotReferences:
    flat = np.sin(np.arange(FLAT_SIZE) + t) + offset
    kw = {}
    if extras:
        kw = {"head_orientation": np.array([1.0, 0.0, 0.0, 0.0]), "left_leg": np.arange(6.0) / 10,
              "right_leg": -np.arange(6.0) / 10}
    return RobotReferences.from_flat(t, flat, **kw)


@pytest.mark.parametrize("threaded", [True, False])
def test_every_channel_round_trips(tmp_path, threaded):
    clock = VirtualClock()
    path = tmp_path / "all.mcap"
    motion = HumanMotion(np.array([0.0, 0.01]), ("pelvis", "head", "left_hand"),
                         np.arange(18.0).reshape(2, 3, 3) / 10, np.tile([1.0, 0.0, 0.0, 0.0], (2, 3, 1)),
                         com=np.array([[0.0, 0.0, 0.9], [0.01, 0.0, 0.9]]))
    refs = make_refs(0.1, extras=True)
    delivered = make_refs(0.2, 1.0)
    compensated = make_refs(0.3, 2.0)
    state = RobotStateSample(0.4, np.arange(4.0), -np.arange(4.0), np.array([0.0, 0.1, 0.5]),
                             np.array([np.nan, 0.02]), ("a", "b", "c", "d"))
    frame = CameraFrame(0.5, bytes(range(256)) * 4, "jpeg", "head_optical")
    stats = {"delay_s": np.float64(0.25), "packets": np.int64(7), "link": "wifi", "history": np.array([1.0, 2.0])}

    with Recorder(path, clock_ns=clock, threaded=threaded) as rec:
        rec.log_operator_input(motion, 1)
        clock.t_ns += 10
        rec.log_references(refs)
        rec.log_delivered_command(delivered, publish_time_ns=clock.t_ns - 7)
        rec.log_compensated_command(compensated)
        rec.log_robot_state(state)
        rec.log_camera_frame(frame, camera="head")
        rec.log_network_stats(stats, log_time_ns=123)

    recording = open_recording(path)
    assert recording.complete and recording.message_count == 7
    assert {c.topic: c.schema_name for c in recording.channels.values()} == {
        "/operator/segments": "teleop.OperatorSegments", "/references": "teleop.RobotReferences",
        "/commands/delivered": "teleop.RobotReferences", "/commands/compensated": "teleop.RobotReferences",
        "/robot/state": "teleop.RobotState", "/camera/head": "foxglove.CompressedImage",
        "/network/stats": "teleop.NetworkStats"}

    [(t_op, op)] = recording.decoded("operator")
    assert t_op == 5_000_000_000
    assert op.segment_names == motion.segment_names
    np.testing.assert_array_equal(op.positions[0], motion.positions[1])
    np.testing.assert_array_equal(op.com[0], motion.com[1])
    assert op.times[0] == motion.times[1]

    [(_, got)] = recording.decoded("references")
    np.testing.assert_array_equal(got.to_flat(), refs.to_flat())  # JSON keeps float64 exactly
    np.testing.assert_array_equal(got.left_leg, refs.left_leg)
    assert got.t == refs.t
    [delivered_msg] = recording.messages("delivered")
    assert delivered_msg.publish_time_ns == delivered_msg.log_time_ns - 7
    [(_, got)] = recording.decoded("compensated")
    np.testing.assert_array_equal(got.to_flat(), compensated.to_flat())

    [(_, got_state)] = recording.decoded("robot_state")
    np.testing.assert_array_equal(got_state.joint_velocities, state.joint_velocities)
    assert np.isnan(got_state.cop[0]) and got_state.cop[1] == 0.02  # NaN written as null
    assert got_state.joint_names == state.joint_names

    [(_, got_frame)] = recording.decoded("camera/head")
    assert got_frame.data == frame.data and got_frame.frame_id == "head_optical"
    assert got_frame.t == pytest.approx(0.5)

    [(t_net, got_stats)] = recording.decoded("network")
    assert t_net == 123
    assert got_stats == {"delay_s": 0.25, "packets": 7, "link": "wifi", "history": [1.0, 2.0]}

    # Standard tools: the mcap library's own reader sees the same file, JSON everywhere.
    with open(path, "rb") as f:
        reader = make_reader(f)
        messages = list(reader.iter_messages())
        assert len(messages) == 7
        for schema, channel, message in messages:
            assert schema.encoding == "jsonschema" and channel.message_encoding == "json"
            json.loads(message.data)
            assert json.loads(schema.data)["title"] == schema.name


def test_camera_message_is_foxglove_compressed_image(tmp_path):
    path = tmp_path / "cam.mcap"
    # Bytes whose standard base64 holds '+' and '/' (URL-safe base64 would write '-' and '_').
    data = b"\xff\xd8\xff\xe0jpeg\xfb\xff\xbf"
    with Recorder(path, threaded=False) as rec:
        rec.log_camera_frame(CameraFrame(12.25, data, "jpeg", "cam"))
    [message] = open_recording(path).messages("camera")
    obj = json.loads(message.data)
    assert obj["timestamp"] == {"sec": 12, "nsec": 250_000_000}
    assert obj["format"] == "jpeg" and obj["frame_id"] == "cam" and isinstance(obj["data"], str)
    # Foxglove reads `data` as standard base64 (RFC 4648 section 4, the schema's contentEncoding):
    # a reader other than ours must get the image bytes back.
    assert obj["data"] == "/9j/4GpwZWf7/78="
    assert base64.b64decode(obj["data"], validate=True) == data


def test_recorded_values_are_copies(tmp_path):
    """The caller may modify its arrays right after log(): the recording keeps what was logged."""
    path = tmp_path / "copy.mcap"
    state = RobotStateSample(0.0, np.zeros(3), np.zeros(3), np.zeros(3), np.zeros(2))
    with Recorder(path) as rec:
        rec.log_robot_state(state)
        state.joint_positions[:] = 99.0
    [(_, got)] = open_recording(path).decoded("robot_state")
    np.testing.assert_array_equal(got.joint_positions, np.zeros(3))


def test_bad_messages_fail_at_the_call_site(tmp_path):
    with Recorder(tmp_path / "bad.mcap") as rec:
        with pytest.raises(TypeError):
            rec.log_references({"t": 0.0})
        with pytest.raises(ValueError):
            rec.log_robot_state({"t": 0.0, "joint_positions": [0.0], "joint_velocities": [0.0],
                                 "com": [0.0, 0.0], "cop": [0.0, 0.0]})
        with pytest.raises(KeyError):
            rec.log("no_such_channel", 1)
        with pytest.raises(ValueError):
            rec.log("episodes", None)


def test_multi_rate_channels_keep_their_rates(tmp_path):
    clock = VirtualClock(0)
    path = tmp_path / "rates.mcap"
    with Recorder(path, clock_ns=clock, threaded=False) as rec:
        rec.declare_channel("references", rate_hz=100)
        for i in range(300):  # 3 s at 100 Hz; network stats at 10 Hz
            clock.t_ns = i * 10_000_000
            rec.log_references(make_refs(i * 0.01))
            if i % 10 == 0:
                rec.log_network_stats({"delay_s": 0.1})
    recording = open_recording(path)
    assert recording.channel("references").rate_hz == pytest.approx(100.0)
    assert recording.channel("references").metadata["rate_hz"] == "100.0"
    assert recording.channel("network").rate_hz == pytest.approx(10.0)
    assert recording.duration_s == pytest.approx(2.99)


def test_full_queue_drops_and_counts_but_keeps_episode_markers(tmp_path):
    path = tmp_path / "drops.mcap"
    rec = Recorder(path, max_queued_messages=0)
    rec.start_episode("wave")
    for i in range(5):
        assert rec.log_references(make_refs(i * 0.01)) is False
    stats = rec.close()
    assert stats.dropped == {"/references": 5} and stats.written == 2
    recording = open_recording(path)
    assert [ep.task for ep in recording.episodes()] == ["wave"]
    assert recording.metadata[-1][0] == "teleop.recorder_stats"
    assert recording.metadata[-1][1]["dropped"] == "5"


def _foxglove_accepts(schema: dict, path: str = "") -> None:
    """The constraints of Foxglove's JSON-schema reader (mcap-support parseJsonSchema)."""
    assert schema.get("type") == "object", f"{path}: Foxglove needs type object"
    assert isinstance(schema.get("properties"), dict), f"{path}: Foxglove needs properties"
    for name, field in schema["properties"].items():
        where = f"{path}.{name}"
        kind = field.get("type")
        assert kind in ("boolean", "string", "number", "integer", "object", "array"), f"{where}: type {kind!r}"
        if kind == "string":
            assert field.get("contentEncoding") in (None, "base64"), where
        elif kind == "object":
            _foxglove_accepts(field, where)
        elif kind == "array":
            item = field["items"]
            assert item.get("type") in ("boolean", "string", "number", "integer", "object"), f"{where}[]"
            if item["type"] == "object":
                _foxglove_accepts(item, where + "[]")
            if item["type"] == "string":
                assert "contentEncoding" not in item, where


def test_every_written_schema_is_readable_by_foxglove(tmp_path):
    path = tmp_path / "schemas.mcap"
    motion = HumanMotion(np.array([0.0]), ("head",), np.zeros((1, 1, 3)), np.tile([1.0, 0, 0, 0], (1, 1, 1)))
    with Recorder(path) as rec:
        rec.start_episode("x")
        rec.log_operator_input(motion)
        rec.log_references(make_refs(0.0))
        rec.log_robot_state(RobotStateSample(0.0, np.zeros(2), np.zeros(2), np.zeros(3), np.zeros(2)))
        rec.log_camera_frame(CameraFrame(0.0, b"jpeg"))
        rec.log_network_stats({"delay_s": 0.1})
    with open(path, "rb") as f:
        schemas = make_reader(f).get_summary().schemas.values()
    assert len(schemas) == 6
    for schema in schemas:
        _foxglove_accepts(json.loads(schema.data), schema.name)


def test_a_teleop_clock_stamps_the_messages(tmp_path):
    from teleop.clock import VirtualClock as TeleopVirtualClock

    clock = TeleopVirtualClock(start=10.0)
    path = tmp_path / "virtual.mcap"
    with Recorder(path, clock=clock) as rec:
        rec.log_references(make_refs(0.0))
        clock.advance(0.25)
        rec.log_references(make_refs(0.25))
    recording = open_recording(path)
    assert [m.log_time_ns for m in recording.messages("references")] == [10_000_000_000, 10_250_000_000]
    assert dict(recording.metadata)["teleop.recording"]["clock"] == "VirtualClock"


def test_a_file_written_without_indexes_or_statistics_is_counted_by_a_scan(tmp_path):
    """Another tool's MCAP file with a summary but neither chunk indexes nor statistics:
    the summary cannot count its messages, so they are counted by a scan (before: 0
    messages); the file was closed properly, so it is complete."""
    from mcap.writer import IndexType, Writer

    from teleop.record import open_recording

    path = tmp_path / "foreign.mcap"
    with open(path, "wb") as f:
        writer = Writer(f, index_types=IndexType.NONE, use_statistics=False)
        writer.start("", "another tool")
        schema = writer.register_schema("s", "jsonschema", b"{}")
        channel = writer.register_channel("/a", "json", schema)
        for i in range(10):
            writer.add_message(channel, i, b"{}", i, i)
        writer.finish()
    recording = open_recording(path)
    assert recording.complete and recording.message_count == 10
