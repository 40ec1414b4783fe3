"""Still-image codec of the video path: baseline JPEG through OpenCV (libjpeg-turbo).

Every frame is coded independently. That is what makes a lost datagram cost exactly one
frame (the next frame decodes on its own), and it keeps encode+decode at a few
milliseconds without a GPU.

Options measured (``teleop.benchmarks.video_bench.measure_codec_options``; synthetic
textured scene from :class:`teleop.video.sources.SyntheticSceneSource`, opencv-python-headless
5.0 / libjpeg-turbo 3.1, one core of the shared 2-core dev machine, median of 60 encodes,
PSNR against the source image):

======================  =========  =========  ========  =========
640x480 option          encode ms  decode ms  size KiB  PSNR dB
======================  =========  =========  ========  =========
q80 4:2:0 (default)     1.5        2.0        39.8      34.8
q80 + OPTIMIZE          3.3        2.0        37.0      34.8
q80 + PROGRESSIVE       8.8        4.4        36.4      34.8
q80 4:4:4               2.4        2.7        48.6      35.1
q80 4:2:2               1.8        2.2        41.7      34.9
q80 4:1:1               2.7        2.3        39.4      34.6
q90                     1.8        2.4        64.7      35.7
q70                     1.4        1.8        30.2      34.2
q50                     1.3        1.6        21.4      33.2
WebP q80 (not JPEG)     52         5.0        20.8      35.3
======================  =========  =========  ========  =========

(320x240 scales by ~1/4: q80 4:2:0 encodes in 0.3-0.5 ms, decodes in 0.4-0.7 ms, 13 KiB.
Two runs a few minutes apart agreed within ~10 %; reproduce with
``python -m teleop.benchmarks.video_bench --codec``.)

Conclusions, which set the defaults of :class:`JpegCodec`:

* ``IMWRITE_JPEG_OPTIMIZE`` (Huffman optimisation, a second pass) doubles encode time
  for 7 % fewer bytes; at these sizes the bytes cost far less than the time on loopback
  or a LAN, so it is **off**.
* Progressive JPEG costs 5x encode and 2x decode time for 9 % fewer bytes: **off**.
* 4:2:0 chroma subsampling (libjpeg's default) is both the fastest and smaller than
  4:2:2/4:4:4 for a negligible PSNR loss; 4:1:1 is slower (non-SIMD path): **4:2:0**.
* Quality barely changes the time (encode 1.3-1.8 ms from q50 to q90) but halves or
  doubles the size; **q80** keeps PSNR > 30 dB with margin, fits a 640x480 frame in
  ~35 datagrams of 1200 bytes. Lower it (e.g. 60) for thin links.
* PNG is lossless and an order of magnitude larger and slower: not considered.
* WebP is 2x smaller but 35x slower to encode: not worth it for latency.
* A real video codec (H.264/VP8) would be 5-10x smaller, but ``cv2.VideoWriter`` only
  writes container files and never hands out the encoded packets, so it cannot feed a
  datagram stream; it would need PyAV/GStreamer (new dependencies), and inter-frame
  coding makes one lost datagram corrupt every frame until the next key frame. Skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import cv2
import numpy as np

#: Wire identifier of the payload format (``codec`` byte of the datagram header).
CODEC_JPEG = 1

_SAMPLING_FLAGS = {
    "420": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420,
    "422": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422,
    "444": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444,
    "411": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_411,
}


#: Largest image :meth:`JpegCodec.decode` accepts, pixels (width x height): 4096 x 4096,
#: far above the frames streamed (320x240 to 640x480; even a 4K camera is 8.3 Mpx). The
#: decoder allocates the size the JPEG header declares before reading any image data, and
#: libjpeg fills missing data with grey: without this bound one forged 700-byte datagram
#: declaring 20000 x 20000 px cost 1.2 GB and 6 s of decoding and was displayed as a frame.
MAX_DECODE_PIXELS = 4096 * 4096

#: JPEG frame-header markers SOF0..SOF15 (0xC4 DHT, 0xC8 JPG and 0xCC DAC are not frame headers).
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


class CodecError(ValueError):
    """An image could not be encoded, or a payload is not a decodable JPEG."""


def jpeg_size(payload: bytes | bytearray | memoryview) -> tuple[int, int]:
    """``(width, height)`` in pixels that a JPEG's frame header (SOFn) declares.

    Reads only the marker segments before the first scan, the way libjpeg finds them
    (bytes between segments are skipped), so it costs microseconds whatever the size.

    Raises:
        CodecError: the payload does not start with a JPEG SOI marker, or has no frame
            header before its image data.
    """
    data = memoryview(payload).cast("B")
    if bytes(data[:2]) != b"\xff\xd8":
        raise CodecError("payload is not a JPEG (no SOI marker)")
    pos, end = 2, len(data)
    while pos + 1 < end:
        if data[pos] != 0xFF or data[pos + 1] == 0xFF:  # garbage or fill byte before a marker
            pos += 1
            continue
        marker = data[pos + 1]
        if marker in (0x00, 0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # no length field
            pos += 2
            continue
        if marker in (0xD9, 0xDA) or pos + 4 > end:  # EOI or image data before any frame header
            break
        if marker in _SOF_MARKERS:
            if pos + 9 > end:
                break
            height = int.from_bytes(data[pos + 5 : pos + 7], "big")
            width = int.from_bytes(data[pos + 7 : pos + 9], "big")
            return width, height
        pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
    raise CodecError("JPEG has no frame header (SOF) before its image data")


@dataclass(frozen=True)
class JpegCodec:
    """Baseline JPEG encoder/decoder on BGR ``uint8`` images.

    Attributes:
        quality: JPEG quality 1-100 (libjpeg scale); 80 by default (see module docstring).
        chroma_subsampling: ``"420"`` (default, fastest), ``"422"``, ``"444"`` or ``"411"``.
        optimize: Huffman table optimisation (second pass): smaller, ~2x slower encode.
    """

    quality: int = 80
    chroma_subsampling: str = "420"
    optimize: bool = False

    #: Value of the header's ``codec`` byte for payloads produced by this codec.
    codec_id: ClassVar[int] = CODEC_JPEG

    def __post_init__(self) -> None:
        if not 1 <= int(self.quality) <= 100:
            raise ValueError(f"JPEG quality must be in 1..100, got {self.quality}")
        if self.chroma_subsampling not in _SAMPLING_FLAGS:
            raise ValueError(
                f"chroma_subsampling must be one of {sorted(_SAMPLING_FLAGS)}, got {self.chroma_subsampling!r}"
            )
        params = [
            cv2.IMWRITE_JPEG_QUALITY, int(self.quality),
            cv2.IMWRITE_JPEG_OPTIMIZE, int(self.optimize),
            cv2.IMWRITE_JPEG_PROGRESSIVE, 0,
            cv2.IMWRITE_JPEG_SAMPLING_FACTOR, _SAMPLING_FLAGS[self.chroma_subsampling],
        ]
        object.__setattr__(self, "_params", params)

    def encode(self, image: np.ndarray) -> bytes:
        """Encode an ``HxWx3`` (BGR) or ``HxW`` ``uint8`` image to JPEG bytes.

        Raises:
            CodecError: if the array is not an 8-bit image OpenCV can encode.
        """
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim not in (2, 3):
            raise CodecError(f"expected an HxWx3 uint8 image, got {getattr(image, 'shape', type(image))}"
                             f" {getattr(image, 'dtype', '')}")
        ok, buffer = cv2.imencode(".jpg", image, self._params)  # type: ignore[attr-defined]
        if not ok:
            raise CodecError(f"cv2.imencode failed for an image of shape {image.shape}")
        return buffer.tobytes()

    @staticmethod
    def decode(payload: bytes | bytearray | memoryview, max_pixels: int = MAX_DECODE_PIXELS) -> np.ndarray:
        """Decode JPEG bytes to an ``HxWx3`` BGR ``uint8`` image.

        Args:
            max_pixels: largest ``width * height`` accepted (see :data:`MAX_DECODE_PIXELS`);
                checked on the header before anything is allocated.

        Raises:
            CodecError: if the payload is not a decodable JPEG or declares more than
                ``max_pixels`` pixels (libjpeg warnings on truncated data are tolerated
                by OpenCV and yield a partly grey image; the datagram layer only hands
                over complete frames, so that does not happen in the pipeline).
        """
        data = np.frombuffer(payload, dtype=np.uint8)
        if data.size == 0:
            raise CodecError("empty payload")
        # Only JPEG: cv2.imdecode would also run its PNG/TIFF/... decoders on forged data.
        width, height = jpeg_size(payload)
        if width * height > max_pixels:
            raise CodecError(f"JPEG declares {width}x{height} px, more than the {max_pixels} px accepted")
        image = cv2.imdecode(data, cv2.IMREAD_COLOR)
        if image is None:
            raise CodecError(f"payload of {data.size} bytes is not a decodable image")
        return image


def psnr_db(reference: np.ndarray, test: np.ndarray) -> float:
    """Peak signal-to-noise ratio of ``test`` against ``reference`` (uint8 images), in dB.

    Returns ``inf`` for identical images.
    """
    if reference.shape != test.shape:
        raise ValueError(f"shape mismatch: {reference.shape} vs {test.shape}")
    mse = float(np.mean((reference.astype(np.float64) - test.astype(np.float64)) ** 2))
    if mse == 0.0:
        return float("inf")
    return 10.0 * float(np.log10(255.0**2 / mse))
