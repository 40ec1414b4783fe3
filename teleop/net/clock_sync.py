"""Clock offset between the two stations, estimated NTP-style over the teleoperation link.

One exchange (RFC 5905 §8): the pinger sends a CLOCK_PING at t1 (its clock), the
responder receives it at t2 and replies at t3 (responder clock), the pinger receives the
CLOCK_PONG at t4. With forward one-way delay d_f and backward delay d_b::

    offset θ = ((t2 − t1) + (t3 − t4)) / 2      responder clock − pinger clock
    rtt    δ = (t4 − t1) − (t3 − t2) = d_f + d_b

Bias. The exchange measures θ_true + (d_f − d_b)/2: any asymmetry between the two one-way
delays of that exchange shows up as offset error, and no two-way exchange can tell the two
apart. Since d_f, d_b ≥ 0 the error is bounded by δ/2 (:attr:`ClockOffsetEstimator.max_error`).
Two filters over a window of recent exchanges are offered:

* ``"min_rtt"`` (default, NTP's clock filter): the offset of the exchange with the
  smallest RTT. Best when delay noise is one-sided queueing (LAN, loopback: error ≪ 1 ms).
  Under *asymmetric jitter* it is biased: it picks exchanges whose jittery direction was
  unusually fast. With the thesis link (τ_f ~ N(τ_D, (2/15)τ_D), τ_b = τ_D constant) and
  a window of n exchanges, the error is E[min of n N(0, σ)]/2 ≈ −0.88σ for n = 16, i.e.
  ≈ −88 ms at τ_D = 750 ms when the pings travel the jittery direction (operator pings
  robot), and +88 ms when the pongs do (robot pings operator).
* ``"median"``: the median offset over the window. Unbiased whenever the two one-way
  delays have equal medians (the thesis model: both centred on τ_D), with standard error
  ≈ 1.25 σ / (2√n); but it carries the whole asymmetry of the mean delays when those differ.

Neither can remove a constant asymmetry of the mean delays; on a deployment where that
matters, synchronise the machines with NTP/PTP over an unimpaired path (as the thesis does,
§5.3.9) and use this estimate only as a check.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

from teleop.net.protocol import ClockPing, ClockPong, PacketType


@dataclass(frozen=True)
class ClockSample:
    """One completed exchange.

    Attributes:
        offset: responder clock − pinger clock [s].
        rtt: round-trip time minus the responder's turnaround [s].
        t4: pinger's clock when the reply arrived [s].
    """

    offset: float
    rtt: float
    t4: float


def exchange_offset_rtt(t1: float, t2: float, t3: float, t4: float) -> tuple[float, float]:
    """(offset, rtt) of one exchange [s]; see the module docstring for t1..t4."""
    return ((t2 - t1) + (t3 - t4)) / 2.0, (t4 - t1) - (t3 - t2)


class ClockOffsetEstimator:
    """Filters exchanges into an offset estimate (remote clock − local clock).

    Args:
        window: number of most recent exchanges kept. A window, rather than all history,
            lets the estimate follow clock drift (a 50 ppm drift moves 1 ms in 20 s).
        method: ``"min_rtt"`` or ``"median"``, see the module docstring.
    """

    METHODS = ("min_rtt", "median")

    def __init__(self, window: int = 16, method: str = "min_rtt") -> None:
        if window < 1:
            raise ValueError("window must be ≥ 1")
        if method not in self.METHODS:
            raise ValueError(f"method must be one of {self.METHODS}")
        self.method = method
        self.samples: deque[ClockSample] = deque(maxlen=window)
        self._median: float | None = None   # median_offset, cached until the next sample
        self.rejected = 0  # exchanges with a negative RTT (clock stepped mid-exchange) or non-finite times

    def add(self, t1: float, t2: float, t3: float, t4: float) -> ClockSample | None:
        """Add one exchange; returns its sample, or None if rejected as impossible."""
        offset, rtt = exchange_offset_rtt(t1, t2, t3, t4)
        # t2 comes from the peer's pong payload, which the codec does not check for
        # finiteness: a NaN would pass `rtt < 0` and could become the offset estimate.
        if not (math.isfinite(offset) and math.isfinite(rtt)) or rtt < 0:
            self.rejected += 1
            return None
        sample = ClockSample(offset, rtt, t4)
        self.samples.append(sample)
        self._median = None
        return sample

    @property
    def ready(self) -> bool:
        return bool(self.samples)

    @property
    def best(self) -> ClockSample | None:
        """The exchange with the smallest RTT in the window."""
        return min(self.samples, key=lambda s: s.rtt, default=None)

    @property
    def offset(self) -> float | None:
        """Remote clock − local clock [s], by the configured method; None before any sample."""
        return self.median_offset if self.method == "median" else self.min_rtt_offset

    @property
    def min_rtt_offset(self) -> float | None:
        """Offset of the smallest-RTT exchange in the window [s]."""
        best = self.best
        return None if best is None else best.offset

    @property
    def median_offset(self) -> float | None:
        """Median offset over the window [s]."""
        # Cached: a station reads the offset several times per 10 ms tick, over a window of
        # a hundred exchanges that changes a few times per second.
        if self._median is None and self.samples:
            # The middle two halved before adding: statistics.median adds them first, which
            # overflows to inf for two finite offsets above ~9e307 (a peer's absurd pong stamp),
            # and an infinite offset made every time the station converts infinite.
            low = statistics.median_low(s.offset for s in self.samples)
            high = statistics.median_high(s.offset for s in self.samples)
            self._median = low if low == high else low / 2.0 + high / 2.0
        return self._median

    @property
    def rtt(self) -> float | None:
        """Smallest RTT in the window [s]."""
        best = self.best
        return None if best is None else best.rtt

    @property
    def max_error(self) -> float | None:
        """Guaranteed bound on the min-RTT offset's error, rtt/2 [s] (assumes no drift)."""
        best = self.best
        return None if best is None else best.rtt / 2.0

    def remote_to_local(self, t_remote: float) -> float:
        """A remote-clock time expressed on the local clock [s]. Needs ≥ 1 sample."""
        offset = self.offset
        if offset is None:
            raise RuntimeError("no clock exchange completed yet")
        return t_remote - offset

    def one_way_delay(self, t_remote_send: float, t_local_receive: float) -> float:
        """Delay of a packet sent at remote time t_remote_send, received locally (Eq. 5.19) [s]."""
        return t_local_receive - self.remote_to_local(t_remote_send)


class ClockSyncClient:
    """Pings a peer through an endpoint at a fixed interval and feeds the estimator.

    Use from a fixed-rate loop: call :meth:`tick` every iteration, and pass every received
    packet to :meth:`handle` (it returns True for the pongs it consumed).

    Args:
        endpoint: a :class:`teleop.net.udp.UdpEndpoint` or :class:`teleop.net.virtual.VirtualEndpoint`.
        peer: address of the responder.
        interval: time between pings [s].
        estimator: where samples go (a default min-RTT estimator if None).
        max_outstanding: pings remembered while waiting for a pong; older ones are
            forgotten, so lost pings cost no memory.
    """

    def __init__(self, endpoint: Any, peer: tuple, *, interval: float = 0.5,
                 estimator: ClockOffsetEstimator | None = None, max_outstanding: int = 64) -> None:
        self.endpoint = endpoint
        self.peer = peer
        self.interval = interval
        self.estimator = estimator or ClockOffsetEstimator()
        self.max_outstanding = max_outstanding
        self._ids = itertools.count(1)
        self._outstanding: OrderedDict[int, float] = OrderedDict()  # exchange id → t1
        self._next_ping = float("-inf")

    def tick(self) -> bool:
        """Send a ping if one is due; returns True if it sent one."""
        now = self.endpoint.clock.now()
        # More than an interval away: our clock stepped back since the last ping (a host
        # clock set back, a VirtualEndpoint's offset changed). Keeping the old schedule
        # stopped the exchanges for as long as the step (5 s back: 5 s without a ping; an
        # hour: an hour), when the estimate needs new exchanges to follow the step.
        if now < self._next_ping and self._next_ping - now <= self.interval:
            return False
        self._next_ping = now + self.interval
        return self.ping()

    def ping(self) -> bool:
        """Send a ping now (t1 is stamped by the endpoint as the packet's send_time)."""
        exchange_id = next(self._ids) & 0xFFFFFFFF
        send_time = self.endpoint.send(ClockPing(exchange_id), self.peer)
        if send_time is None:
            return False
        self._outstanding[exchange_id] = send_time
        while len(self._outstanding) > self.max_outstanding:
            self._outstanding.popitem(last=False)
        return True

    def handle(self, received: Any) -> bool:
        """Consume a received CLOCK_PONG answering one of our pings; False for anything else.

        Uses our own record of t1 rather than the echoed one, and accepts each exchange
        once, so duplicated pongs do not count twice.
        """
        packet = received.packet
        if packet.packet_type != PacketType.CLOCK_PONG:
            return False
        if received.peer != self.peer:
            # A pong from another station (an operator the robot has switched away from,
            # answering a ping of an earlier client whose exchange ids also started at 1)
            # would pair with the wrong t1: consumed, not counted.
            return True
        pong: ClockPong = packet.message
        t1 = self._outstanding.get(pong.exchange_id)
        # The pong must echo the t1 of *our* ping of that id (bit for bit: both are the ping
        # header's float64). Exchange ids restart at 1 with every client, so a pong captured
        # in an earlier session under the same secret (a new source id is a new stream to the
        # replay filter) and replayed while our ping of that id was out paired with our t1,
        # and its old t2, t3 made any offset: replayed pongs outvoted the genuine ones in the
        # median. Not popped on a mismatch: the genuine pong may still come.
        if t1 is not None and pong.ping_send_time == float(t1):
            del self._outstanding[pong.exchange_id]
            self.estimator.add(t1, pong.ping_receive_time, packet.send_time, received.arrival_time)
        return True


def answer_ping(endpoint: Any, received: Any) -> bool:
    """If ``received`` is a CLOCK_PING, send the CLOCK_PONG back to its sender.

    t2 is the ping's arrival time as recorded by the endpoint (kernel receive timestamp
    when available, so the time the ping waited for the loop to poll does not count).
    """
    packet = received.packet
    if packet.packet_type != PacketType.CLOCK_PING:
        return False
    pong = ClockPong(packet.message.exchange_id, packet.send_time, received.arrival_time)
    endpoint.send(pong, received.peer)
    return True
