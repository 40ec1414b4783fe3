"""OpenCV's own warnings kept off the terminal where the product says what went wrong.

Opening a camera that is not there makes OpenCV's C++ backends log lines such as
``[ WARN:0@0.066] global cap_v4l.cpp:914 open VIDEOIO(V4L2:/dev/video0): can't open camera
by index`` on stderr, before the product's own error ("cannot open camera device '0'"),
which says the same for the user. OpenCV errors are still logged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def opencv_warnings_silenced() -> Iterator[None]:
    """Lower OpenCV's log level to errors for the duration (a level already quieter stays)."""
    from cv2.utils import logging as cv_logging

    level = cv_logging.getLogLevel()
    cv_logging.setLogLevel(min(level, cv_logging.LOG_LEVEL_ERROR))
    try:
        yield
    finally:
        cv_logging.setLogLevel(level)
