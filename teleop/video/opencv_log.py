"""OpenCV's own warnings kept off the terminal where the product says what went wrong.

Opening a camera that is not there makes OpenCV's C++ backends log lines such as
``[ WARN:0@0.066] global cap_v4l.cpp:914 open VIDEOIO(V4L2:/dev/video0): can't open camera
by index`` on stderr, before the product's own error ("cannot open camera device '0'"),
which says the same for the user. OpenCV errors are still logged.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator


#: OpenCV's log levels (cv::utils::logging::LogLevel), the same numbers in OpenCV 4 and 5.
LOG_LEVEL_SILENT = 0
LOG_LEVEL_ERROR = 2


def _log_level_functions() -> tuple[Callable[[], int], Callable[[int], object]]:
    """(get, set) of OpenCV's log level: cv2.utils.logging in OpenCV 5, the top level of cv2
    in OpenCV 4 (each version's stubs name only its own place, hence import_module and getattr)."""
    try:
        cv_logging = importlib.import_module("cv2.utils.logging")
    except ImportError:
        import cv2
        return getattr(cv2, "getLogLevel"), getattr(cv2, "setLogLevel")  # noqa: B009
    return cv_logging.getLogLevel, cv_logging.setLogLevel


def get_log_level() -> int:
    """OpenCV's current log level (0 silent, 2 errors, 3 warnings, ... 6 verbose)."""
    return int(_log_level_functions()[0]())


def set_log_level(level: int) -> None:
    """Set OpenCV's log level."""
    _log_level_functions()[1](level)


@contextlib.contextmanager
def opencv_warnings_silenced() -> Iterator[None]:
    """Lower OpenCV's log level to errors for the duration (a level already quieter stays)."""
    level = get_log_level()
    set_log_level(min(level, LOG_LEVEL_ERROR))
    try:
        yield
    finally:
        set_log_level(level)
