"""Inputs review: bad values refused where they are given, not crashing the session later;
``teleop stream-mvn`` says what it sent however it ends.

The OpenVR tests use the fake of :mod:`tests.test_inputs_openvr`; the stream-mvn tests run
the real ``teleop`` entry point in-process over loopback.
"""

from __future__ import annotations

import socket

import pytest

from teleop.cli import main
from teleop.inputs import mvn_cli
from teleop.inputs.openvr_input import OpenVRConfig, OpenVRSource
from teleop.inputs.synthetic import generate
from tests.test_inputs_openvr import _devices_from, make_fake_openvr


# --------------------------------------------------------------------- OpenVR config
@pytest.mark.parametrize("text, expected", [
    ('{"rate_hz": 0}', "rate_hz: expected a frame rate > 0"),        # ZeroDivisionError in poll
    ('{"rate_hz": -90}', "rate_hz: expected a frame rate > 0"),      # a frame on every poll
    ('{"rate_hz": "90"}', "rate_hz: expected a frame rate > 0"),     # TypeError in poll
    ('{"trackers": ["LHR-1"]}', "trackers: expected an object"),     # AttributeError at start
    ("5", "must be a JSON object"),                                  # TypeError at start
    ("null", "must be a JSON object"),
])
def test_openvr_config_with_bad_types_or_rate_is_refused_when_loaded(tmp_path, text, expected):
    path = tmp_path / "vr.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=expected):
        OpenVRConfig.load(path)


def test_openvr_config_rate_is_used_when_the_headset_does_not_report_one():
    motion = generate("reach_forward", seed=3, rate_hz=90.0)
    fake = make_fake_openvr(_devices_from(motion, 3), [0])
    init = fake.init

    def init_without_display_frequency(application_type):
        system = init(application_type)
        system.getFloatTrackedDeviceProperty = lambda index, prop: (_ for _ in ()).throw(RuntimeError("unknown"))
        return system

    fake.init = init_without_display_frequency
    source = OpenVRSource(OpenVRConfig(rate_hz=50), openvr_module=fake)
    assert source.rate_hz == 50.0
    source.poll(0.0)
    source.calibrate("npose")
    assert source.poll(0.0) is not None and source.poll(0.01) is None and source.poll(0.02) is not None


# ------------------------------------------------------------------------ stream-mvn
def test_stream_mvn_refuses_port_0_as_a_destination(capsys, motion_file):
    # Port 0 ("any free port") only means something when listening: every datagram sent
    # to it fails, and with --loop the stream went on failing silently.
    with pytest.raises(SystemExit) as exc:
        main(["stream-mvn", str(motion_file), "--port", "0", "--duration", "0.05"])
    assert exc.value.code == 2
    assert "argument --port: port 0 is not a destination" in capsys.readouterr().err


def test_stream_mvn_ended_by_ctrl_c_still_says_what_it_sent(capsys, monkeypatch, motion_file):
    # --loop streams until Ctrl-C (the documented use): the summary and any send errors
    # must still be reported then, not dropped.
    real, calls = mvn_cli.motion_datagrams, [0]

    def interrupted_at_the_fifth_sample(*args):
        calls[0] += 1
        if calls[0] == 5:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(mvn_cli, "motion_datagrams", interrupted_at_the_fifth_sample)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("127.0.0.1", 0))
        code = main(["stream-mvn", str(motion_file), "--port", str(receiver.getsockname()[1]), "--loop"])
    assert code == 0
    assert "sent 4 samples in 5 datagrams" in capsys.readouterr().out     # 4 poses + the name (type 12)
