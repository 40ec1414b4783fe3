"""The keys of the link, derived from the shared secret (:mod:`teleop.net.secret`), one per
use (domain separation): the packets' MAC key (:func:`derive_mac_key`) and the video
datagrams' MAC hooks (:func:`video_mac`, for :mod:`teleop.video.wire`). The raw secret is
never a key itself.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Callable

from teleop.net.secret import MIN_SECRET_BYTES


def _derive(secret: bytes, purpose: bytes) -> bytes:
    """HMAC-SHA256(secret, purpose): the key of one use of the secret."""
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"the shared secret must be at least {MIN_SECRET_BYTES} bytes")
    return hmac.new(secret, purpose, hashlib.sha256).digest()


def derive_mac_key(secret: bytes) -> bytes:
    """Key used for packet MACs, derived from the shared secret (domain separation)."""
    return _derive(secret, b"teleop.net packet MAC v1")


#: Length of the video datagrams' MAC tag [bytes] (HMAC-SHA256, truncated: 128 bits).
VIDEO_TAG_BYTES = 16


def video_mac(secret: bytes) -> tuple[Callable[[bytes], bytes], Callable[[bytes, bytes], bool]]:
    """``(authenticate, verify)`` hooks for the video datagrams (:mod:`teleop.video.wire`):
    HMAC-SHA256 of header and slice, truncated to :data:`VIDEO_TAG_BYTES`, under a key
    derived from the shared secret for video alone (domain separation from the packets').

    Without them anyone who can reach the operator's video port could show the operator a
    robot that is not there; with them a station with another secret is refused too.
    """
    key = _derive(secret, b"teleop.video frame MAC v1")

    def authenticate(message: bytes) -> bytes:
        return hmac.new(key, message, hashlib.sha256).digest()[:VIDEO_TAG_BYTES]

    def verify(message: bytes, tag: bytes) -> bool:
        return len(tag) == VIDEO_TAG_BYTES and hmac.compare_digest(authenticate(message), tag)

    return authenticate, verify
