"""Video path of the teleoperation: robot eye camera -> operator display, over UDP.

Pipeline (robot side, then operator side)::

    FrameSource.read() -> VideoSender (JPEG encode, datagrams) ~~UDP~~>
    VideoReceiver (reassembly, decode) -> JitterBuffer (fixed-delay playout)
    -> display callback (e.g. VideoWebViewer.publish_jpeg of the received JPEG)

Modules: :mod:`~teleop.video.sources`, :mod:`~teleop.video.codec`,
:mod:`~teleop.video.wire` (datagram format), :mod:`~teleop.video.sender`,
:mod:`~teleop.video.receiver`, :mod:`~teleop.video.jitter_buffer`,
:mod:`~teleop.video.playback` (operator loop), :mod:`~teleop.video.web` (browser viewer;
its server with bounded connections, :mod:`~teleop.video.http_server`),
:mod:`~teleop.video.clock` (the single clock: ``CLOCK_MONOTONIC`` seconds).
"""

from teleop.video.clock import monotonic_s
from teleop.video.codec import CodecError, JpegCodec, psnr_db
from teleop.video.jitter_buffer import JitterBuffer
from teleop.video.playback import VideoPlayback
from teleop.video.receiver import FrameTiming, ReceivedFrame, VideoReceiver
from teleop.video.sender import VideoSender, VideoStreamer
from teleop.video.sources import (
    EndOfStream,
    FrameSource,
    OpenCVCaptureSource,
    SourceOpenError,
    SyntheticSceneSource,
)
from teleop.video.web import VideoWebViewer
from teleop.video.wire import StreamId

__all__ = [
    "CodecError",
    "EndOfStream",
    "FrameSource",
    "FrameTiming",
    "JitterBuffer",
    "JpegCodec",
    "OpenCVCaptureSource",
    "ReceivedFrame",
    "SourceOpenError",
    "StreamId",
    "SyntheticSceneSource",
    "VideoPlayback",
    "VideoReceiver",
    "VideoSender",
    "VideoStreamer",
    "VideoWebViewer",
    "monotonic_s",
    "psnr_db",
]
