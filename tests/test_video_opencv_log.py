"""A camera that is not there: the product's error alone, not OpenCV's warnings before it."""

import pytest

from teleop.jog.camera import CameraError, CameraSource
from teleop.video.opencv_log import (LOG_LEVEL_ERROR, LOG_LEVEL_SILENT, get_log_level, opencv_warnings_silenced,
                                     set_log_level)
from teleop.video.sources import OpenCVCaptureSource, SourceOpenError

ABSENT_DEVICE = 97     # no machine running the tests has 98 cameras


@pytest.mark.parametrize("open_camera, error", [(lambda: CameraSource(ABSENT_DEVICE), CameraError),
                                                (lambda: OpenCVCaptureSource(ABSENT_DEVICE), SourceOpenError)])
def test_opening_an_absent_camera_leaves_stderr_to_the_error(capfd, open_camera, error):
    with pytest.raises(error):
        open_camera()
    captured = capfd.readouterr()      # descriptor level: OpenCV logs from C++
    assert "WARN" not in captured.err, captured.err


def test_the_log_level_is_restored_and_a_quieter_one_kept():
    before = get_log_level()
    with opencv_warnings_silenced():
        assert get_log_level() <= LOG_LEVEL_ERROR
    assert get_log_level() == before
    set_log_level(LOG_LEVEL_SILENT)
    try:
        with opencv_warnings_silenced():
            assert get_log_level() == LOG_LEVEL_SILENT
    finally:
        set_log_level(before)


def test_the_levels_are_opencvs():
    cv_logging = pytest.importorskip("cv2.utils.logging", reason="this OpenCV (4.10) names no log levels")
    assert (LOG_LEVEL_SILENT, LOG_LEVEL_ERROR) == (cv_logging.LOG_LEVEL_SILENT, cv_logging.LOG_LEVEL_ERROR)
