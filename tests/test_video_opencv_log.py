"""A camera that is not there: the product's error alone, not OpenCV's warnings before it."""

import pytest
from cv2.utils import logging as cv_logging

from teleop.jog.camera import CameraError, CameraSource
from teleop.video.opencv_log import opencv_warnings_silenced
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
    before = cv_logging.getLogLevel()
    with opencv_warnings_silenced():
        assert cv_logging.getLogLevel() <= cv_logging.LOG_LEVEL_ERROR
    assert cv_logging.getLogLevel() == before
    cv_logging.setLogLevel(cv_logging.LOG_LEVEL_SILENT)
    try:
        with opencv_warnings_silenced():
            assert cv_logging.getLogLevel() == cv_logging.LOG_LEVEL_SILENT
    finally:
        cv_logging.setLogLevel(before)
