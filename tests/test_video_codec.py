"""JPEG codec: round-trip quality, settings validation, bad input."""

import numpy as np
import pytest

from teleop.video.codec import CodecError, JpegCodec, psnr_db
from teleop.video.sources import SyntheticSceneSource


@pytest.mark.parametrize("size", [(320, 240), (640, 480)])
def test_round_trip_psnr_above_30_db_at_default_quality(size):
    image = SyntheticSceneSource(*size).render(7)
    codec = JpegCodec()
    payload = codec.encode(image)
    decoded = codec.decode(payload)
    assert decoded.shape == image.shape and decoded.dtype == np.uint8
    assert psnr_db(image, decoded) > 30.0
    # A textured frame must not collapse to a few hundred bytes like a flat colour would.
    assert len(payload) > 5_000


def test_lower_quality_gives_smaller_frames():
    image = SyntheticSceneSource(320, 240).render(0)
    assert len(JpegCodec(quality=50).encode(image)) < len(JpegCodec(quality=90).encode(image))


def test_invalid_settings_rejected():
    with pytest.raises(ValueError):
        JpegCodec(quality=0)
    with pytest.raises(ValueError):
        JpegCodec(chroma_subsampling="999")


def test_bad_input_raises_codec_error():
    with pytest.raises(CodecError):
        JpegCodec.decode(b"definitely not a jpeg")
    with pytest.raises(CodecError):
        JpegCodec.decode(b"")
    with pytest.raises(CodecError):
        JpegCodec().encode(np.zeros((4, 4, 3), np.float32))


def test_psnr_identical_is_infinite():
    image = np.full((8, 8, 3), 100, np.uint8)
    assert psnr_db(image, image) == float("inf")
