"""The stations' status lines: the operator's, and the task the robot's names."""

import pytest

from teleop.net.protocol import Feedback
from teleop.net.watchdog import WatchdogState
from teleop.prescient.compensator import CompensationState
from teleop.stations.operator_status import image_age_s, state_name, status_line
from teleop.stations.robot_station import STATE_CODES


def test_the_line_says_what_the_robot_does_and_how_old_the_images_are():
    # Robot clock 3 s ahead of ours: the frames' raw age (our arrival − its capture) is 3 s short.
    feedback = Feedback(watchdog_state=WatchdogState.ACTIVE,
                        compensation_state=STATE_CODES[CompensationState.PREDICTING],
                        forward_delay=0.75, clock_offset=3.0)
    line = status_line(2.0, 200, 20, feedback, {"tau_b_s": -2.23}, "loop: 0.1 % late")
    assert line == ("[operator] robot ACTIVE   predicting  tau_f 0.750 s  sent 100.0/s  video 10.0 fps, 0.770 s old  "
                    "loop: 0.1 % late")


def test_a_robot_gone_quiet_is_not_shown_as_its_last_report():
    # The robot killed mid-session: the line kept saying "robot ACTIVE passthrough" for as
    # long as it was gone, and the image's transit age as if it were current.
    feedback = Feedback(watchdog_state=WatchdogState.ACTIVE,
                        compensation_state=STATE_CODES[CompensationState.PREDICTING],
                        forward_delay=0.75, clock_offset=3.0)
    line = status_line(2.0, 200, 0, feedback, {"tau_b_s": -2.23}, "loop: 0.1 % late", 8.24, 8.3)
    assert line == ("[operator] robot: silent 8.2 s (last: ACTIVE predicting)  sent 100.0/s  video  0.0 fps, "
                    "0.770 s old, last image shown 8.3 s ago  loop: 0.1 % late")
    # Feedback and images that keep coming: as before.
    assert "robot ACTIVE   predicting  tau_f 0.750 s" in status_line(2.0, 200, 20, feedback, {"tau_b_s": -2.23}, "",
                                                                    0.01, 0.08)


def test_before_the_robot_answered_nothing_is_made_up():
    line = status_line(2.0, 200, 0, None, {"tau_b_s": None}, "loop: 0.0 % late")
    assert line == "[operator] robot: no feedback yet  sent 100.0/s  video  0.0 fps  loop: 0.0 % late"
    unmeasured = Feedback(watchdog_state=WatchdogState.WAITING)        # NaN delay and offset
    assert "tau_f n/a" in status_line(2.0, 0, 0, unmeasured, {"tau_b_s": 0.8}, "")
    assert image_age_s({"tau_b_s": 0.8}, unmeasured) is None


@pytest.mark.parametrize("state", list(CompensationState))
def test_the_state_codes_read_back_as_the_robot_station_numbers_them(state):
    assert state_name(CompensationState, STATE_CODES[state]) == state.name.lower()
    assert state_name(CompensationState, 200) == "code 200"


def test_the_robot_status_names_the_task_it_predicts():
    import numpy as np

    from teleop.prescient.compensator import CompensatorOutput
    from teleop.stations.cli import _recognised

    predicting = CompensatorOutput(np.zeros(20), CompensationState.PREDICTING, task="squat", task_probability=0.973,
                                   speed=1.1)
    assert _recognised(predicting) == " squat p=0.97 x1.10"
    # Pass-through (the task of a motion that ended is still known): nothing to name.
    assert _recognised(CompensatorOutput(np.zeros(20), CompensationState.PASSTHROUGH, task="squat")) == ""
    assert _recognised(None) == ""


def test_the_operator_is_warned_when_most_video_frames_arrive_incomplete():
    from teleop.stations.operator_status import incomplete_video_warning

    assert incomplete_video_warning(completed=20, incomplete=0, timeout_s=0.2) is None
    assert incomplete_video_warning(completed=20, incomplete=4, timeout_s=0.2) is None     # a lost datagram or two
    assert incomplete_video_warning(completed=10, incomplete=9, timeout_s=0.2) is None     # not most
    assert incomplete_video_warning(completed=1, incomplete=3, timeout_s=0.2) is None      # too few to tell
    warning = incomplete_video_warning(completed=2, incomplete=18, timeout_s=0.5)
    assert warning.startswith("18 of 20 video frames in the last interval arrived incomplete")
    assert "still missing 0.5 s after the frame's first" in warning and "--jitter-buffer" in warning


def test_the_first_video_rate_is_counted_from_the_first_frame(capsys):
    """The video starts a round trip after the operator's stream: the first status line
    counted its frames over the whole interval and said 11-12 fps of a 20 fps stream."""
    import time
    from types import SimpleNamespace

    from teleop.stations.operator_events import OperatorEvents

    now = 100.0                                     # the station's clock [s]
    clock = SimpleNamespace(now=lambda: now)
    station = SimpleNamespace(sent=200, feedback=None, feedback_at=None,
                              endpoint=SimpleNamespace(clock=clock, stats=SimpleNamespace(kernel_dropped=0)))
    stats = SimpleNamespace(frames_completed=11, frames_dropped_timeout=0, frames_dropped_evicted=0,
                            kernel_dropped=None)
    video = SimpleNamespace(displayed=11, first_displayed_at=now - 0.5, displayed_at=now,
                            buffer=SimpleNamespace(report=lambda: {}),
                            receiver=SimpleNamespace(stats=stats, frame_timeout_s=0.2))
    events = OperatorEvents(station, video, "synthetic", None, "127.0.0.1:9003")
    events._last_status = (time.monotonic() - 2.0, 0, 0)     # the first line, 2 s after the start
    events.print_status(SimpleNamespace(short=lambda: "loop ok"))
    err = capsys.readouterr().err
    assert "video 20.0 fps" in err   # 10 intervals in 0.5 s (not 11 frames in 2 s)
    assert err.endswith("loop ok\n")                      # no kernel drops: nothing said of them
    # Two frames shown back to back just before the line: no rate over 10 ms (100 fps).
    video.displayed, video.first_displayed_at = 2, now - 0.01
    events._last_status = (time.monotonic() - 2.0, 0, 0)
    events.print_status(SimpleNamespace(short=lambda: "loop ok"))
    assert "video  1.0 fps" in capsys.readouterr().err   # the interval's: 2 frames in 2 s
    video.displayed, video.first_displayed_at = 11, now - 0.5
    video.displayed, video.displayed_at = 51, now + 2.0         # the next line: over its whole interval
    events._last_status = (time.monotonic() - 2.0, 200, 11)
    stats.kernel_dropped, station.endpoint.stats.kernel_dropped = 4, 2
    events.print_status(SimpleNamespace(short=lambda: "loop ok"))
    err = capsys.readouterr().err
    assert "video 20.0 fps" in err
    assert err.endswith("loop ok  4 video datagrams and 2 packets dropped by the kernel\n")


@pytest.mark.parametrize("watchdog", [WatchdogState.WAITING, WatchdogState.STALE])
def test_a_robot_that_holds_is_said_to_hold(watchdog):
    """While the watchdog holds the robot's pose, the line said "STALE passthrough": what
    the compensator would do with commands, not what the robot does."""
    feedback = Feedback(watchdog_state=watchdog, compensation_state=STATE_CODES[CompensationState.PASSTHROUGH],
                        forward_delay=0.75, clock_offset=0.0)
    line = status_line(2.0, 0, 0, feedback, {"tau_b_s": 0.8}, "")
    assert f"robot {watchdog.name:8s} holding     tau_f 0.750 s" in line
    resuming = Feedback(watchdog_state=WatchdogState.RESUMING,
                        compensation_state=STATE_CODES[CompensationState.PASSTHROUGH], forward_delay=0.75)
    assert "robot RESUMING passthrough tau_f 0.750 s" in status_line(2.0, 0, 0, resuming, {"tau_b_s": 0.8}, "")
