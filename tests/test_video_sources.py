"""Frame sources: synthetic scene and the OpenCV capture wrapper."""

import cv2
import numpy as np
import pytest

from teleop.video.sources import (
    EndOfStream,
    FrameSource,
    OpenCVCaptureSource,
    SourceOpenError,
    SyntheticSceneSource,
)


def test_synthetic_source_frames_are_bgr_moving_and_timestamped():
    ticks = iter([1.0, 2.0])
    source = SyntheticSceneSource(160, 120, clock=lambda: next(ticks))
    assert isinstance(source, FrameSource)
    t0, a = source.read()
    t1, b = source.read()
    assert (t0, t1) == (1.0, 2.0)
    assert a.shape == (120, 160, 3) and a.dtype == np.uint8
    assert np.any(a != b)  # content moves
    assert np.array_equal(source.render(0), a)  # deterministic
    assert a.std() > 10  # textured, not flat


def test_opencv_source_missing_file_raises_clear_error(tmp_path):
    with pytest.raises(SourceOpenError, match="could not open"):
        OpenCVCaptureSource(str(tmp_path / "missing.avi"))


def test_opencv_source_reads_a_video_file(tmp_path):
    path = str(tmp_path / "clip.avi")
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), 30.0, (160, 120))
    if not writer.isOpened():
        pytest.skip("this OpenCV build cannot write MJPG/AVI")
    scene = SyntheticSceneSource(160, 120)
    for index in range(3):
        writer.write(scene.render(index))
    writer.release()
    with OpenCVCaptureSource(path, size=(80, 60)) as source:
        frames = [source.read() for _ in range(3)]
        with pytest.raises(EndOfStream):
            source.read()
    assert all(image.shape == (60, 80, 3) for _, image in frames)
    assert frames[0][0] <= frames[1][0] <= frames[2][0]
    # The content: frame k is the k-th written image (BGR, in order), resized to 80x60. An
    # independent reference: OpenCV's area resize of the original. MJPG costs a little
    # (measured 39 dB); the neighbouring frames are <= 27.3 dB and a red/blue swap 22 dB.
    from teleop.video.codec import psnr_db

    expected = [cv2.resize(scene.render(index), (80, 60), interpolation=cv2.INTER_AREA) for index in range(3)]
    for index, (_, image) in enumerate(frames):
        scores = [psnr_db(reference, image) for reference in expected]
        assert scores[index] > 33.0 and int(np.argmax(scores)) == index, (index, scores)
