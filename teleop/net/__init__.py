"""Network layer of the teleoperation link.

Modules, one concern each:

* :mod:`~teleop.net.protocol`: wire format, MAC, payload codecs.
* :mod:`~teleop.net.secret`: where the shared secret comes from.
* :mod:`~teleop.net.udp`: non-blocking UDP endpoint for fixed-rate loops.
* :mod:`~teleop.net.virtual`: endpoints on a virtual clock (trials faster than real time).
* :mod:`~teleop.net.auth`: the keys derived from the shared secret (packet and video MACs).
* :mod:`~teleop.net.packet_filter`: authenticated, fresh packets out of datagrams (anti-replay).
* :mod:`~teleop.net.clock_sync`: NTP-style clock offset estimation over the link.
* :mod:`~teleop.net.delay`: delay/jitter/loss model, and the virtual-clock link.
* :mod:`~teleop.net.netem`: real-time impairment proxy (``teleop netem``).
* :mod:`~teleop.net.watchdog`: stale-command watchdog with smooth resume.
* :mod:`~teleop.net.cli`: the ``netem`` subcommand.

The names below are importable from ``teleop.net`` directly. They load on first use, so
that registering the ``netem`` subcommand (``teleop --help``) does not import numpy.
"""

import importlib

_EXPORTS = {
    "ClockOffsetEstimator": "clock_sync", "ClockSyncClient": "clock_sync", "answer_ping": "clock_sync",
    "DirectionModel": "delay", "LinkModel": "delay", "VirtualLink": "delay",
    "ClockPing": "protocol", "ClockPong": "protocol", "Feedback": "protocol", "Packet": "protocol",
    "PacketCodec": "protocol", "PacketFilter": "packet_filter", "PacketType": "protocol",
    "ProtocolError": "protocol", "VideoReport": "protocol",
    "load_secret": "secret", "session_secret": "secret",
    "Received": "udp", "UdpEndpoint": "udp",
    "VirtualEndpoint": "virtual", "connect_virtual": "virtual",
    "StaleCommandWatchdog": "watchdog", "WatchdogState": "watchdog",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'teleop.net' has no attribute {name!r}")
    return getattr(importlib.import_module(f"teleop.net.{module}"), name)
