"""Network impairment model: delay, jitter, loss, duplication, reordering, bandwidth.

One :class:`DirectionModel` describes one direction of the link; :class:`DelayLine`
applies it packet by packet (it decides *when* each packet is delivered, or that it is
lost). The same decision code serves two clocks:

* :class:`VirtualLink` on a virtual clock: push (t_send, bytes), pop what is due at
  ``now``. Trials run faster than real time through the same code path as the stations.
* :mod:`teleop.net.netem`, the real-time UDP proxy.

Per packet, in order (thesis §5.3.8, Eqs. 5.14–5.17):

1. loss with probability ``loss``: independently per packet, or, with ``loss_burst`` set, in
   runs of consecutive packets (Gilbert's two-state model, below);
2. duplication with probability ``duplicate`` (the copy gets its own delay);
3. serialisation at ``rate_bps`` behind the packets already queued (a FIFO link of that
   bandwidth); tail drop once the queue holds more than ``queue_limit`` seconds;
4. one-way delay ``delay + N(0, σ)`` with σ = ``jitter``, by default the thesis'
   (2/15)·delay (Eq. 5.17), clipped to [0, ``max_delay``]. Delays are sampled independently,
   so a packet can overtake the previous one (reordering, like netem with jitter);
   ``keep_order`` holds each packet until the previous one is delivered instead, which
   skews the delay distribution upwards.

Bursty loss (Gilbert 1960; the ``gemodel`` of Linux netem with h = 1, k = 0): a link is
*good* (delivers) or *bad* (loses everything), and changes state before each packet with

    P(good → bad) = p = loss · r / (1 − loss),     P(bad → good) = r = 1 / loss_burst,

so that the long-run loss rate is p / (p + r) = ``loss`` and a run of consecutive losses
lasts ``loss_burst`` packets on average (geometric). Wireless links and congested queues
lose packets this way; a video frame of 40 datagrams meets a burst, not 3 scattered losses.

All randomness comes from one ``random.Random`` per direction, seeded, so a trial is
reproducible from its seed.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from dataclasses import dataclass, field

#: σ_τf / τ_f,D in the thesis experiments (Eq. 5.17).
THESIS_JITTER_RATIO = 2.0 / 15.0
#: Default cap on one packet's propagation delay [s] (see DirectionModel.max_delay).
DEFAULT_MAX_DELAY = 10.0


@dataclass(frozen=True)
class DirectionModel:
    """Impairments of one direction of the link.

    Attributes:
        delay: constant part of the one-way delay τ_D [s].
        jitter: standard deviation of the Gaussian part [s]; None = THESIS_JITTER_RATIO·delay,
            0 = constant delay.
        loss: probability that a packet is lost, in [0, 1] (the long-run share of packets lost).
        loss_burst: mean number of packets lost in a row [packets], ≥ 1 (Gilbert model, see the
            module docstring); None = each packet lost independently (mean run 1/(1 − loss)).
        duplicate: probability that a packet is delivered twice, in [0, 1].
        keep_order: deliver in send order (no overtaking).
        rate_bps: bandwidth [bit/s]; None = unlimited.
        queue_limit: longest queueing delay behind the bandwidth limit before tail drop [s].
        max_delay: hard cap on the propagation delay of any packet [s]; None = the larger of
            ``DEFAULT_MAX_DELAY`` and delay + 6 sigma (a fixed 10 s refused every round trip
            over 20 s, e.g. ``teleop trial --rtt 30``, in the middle of a sweep).
    """

    delay: float = 0.0
    jitter: float | None = None
    loss: float = 0.0
    loss_burst: float | None = None
    duplicate: float = 0.0
    keep_order: bool = False
    rate_bps: float | None = None
    queue_limit: float = 1.0
    max_delay: float | None = None

    def __post_init__(self) -> None:
        numbers = [self.delay, self.loss, self.duplicate, self.queue_limit] + \
            [x for x in (self.jitter, self.loss_burst, self.rate_bps, self.max_delay) if x is not None]
        if not all(math.isfinite(x) for x in numbers):   # NaN passes every comparison below
            raise ValueError("delay model values must be finite numbers")
        if self.delay < 0 or (self.jitter is not None and self.jitter < 0):
            raise ValueError("delay and jitter must be ≥ 0")
        max_delay = self.max_delay
        if max_delay is None:   # frozen dataclass: set the derived default once
            max_delay = max(DEFAULT_MAX_DELAY, self.delay + 6.0 * self.sigma)
            object.__setattr__(self, "max_delay", max_delay)
        if not (0.0 <= self.loss <= 1.0 and 0.0 <= self.duplicate <= 1.0):
            raise ValueError("loss and duplicate are probabilities in [0, 1]")
        if self.loss_burst is not None and not (self.loss_burst >= 1.0 and self.loss < 1.0):
            # Below one packet a run of losses is not a run; at loss 1 there is no good state.
            raise ValueError(f"loss_burst is a mean run length ≥ 1 packet with loss < 1, got "
                             f"{self.loss_burst:g} at loss {self.loss:g}")
        if self.rate_bps is not None and self.rate_bps <= 0:
            raise ValueError("rate_bps must be > 0 (None for unlimited)")
        if max_delay < self.delay:
            raise ValueError(f"max_delay ({max_delay:g} s) must be ≥ delay ({self.delay:g} s)")
        if self.queue_limit < 0:
            raise ValueError("queue_limit must be ≥ 0")

    @property
    def sigma(self) -> float:
        """Jitter standard deviation actually used [s]."""
        return THESIS_JITTER_RATIO * self.delay if self.jitter is None else self.jitter

    @property
    def burst_transitions(self) -> tuple[float, float]:
        """(p, r) of the Gilbert model: P(good → bad) and P(bad → good) per packet."""
        assert self.loss_burst is not None
        r = 1.0 / self.loss_burst
        return self.loss * r / (1.0 - self.loss), r

    @classmethod
    def constant(cls, delay: float, **kw) -> "DirectionModel":
        """A delay without jitter."""
        return cls(delay=delay, jitter=0.0, **kw)


@dataclass(frozen=True)
class LinkModel:
    """Both directions: forward = operator → robot (commands), backward = robot → operator."""

    forward: DirectionModel = field(default_factory=DirectionModel)
    backward: DirectionModel = field(default_factory=DirectionModel)

    @classmethod
    def thesis(cls, one_way_delay: float) -> "LinkModel":
        """The thesis experiments (Eqs. 5.16-5.18): τ_f ~ N(τ_D, σ = (2/15)τ_D), τ_b = τ_D
        constant, with τ_D = ``one_way_delay`` [s]."""
        return cls(DirectionModel(delay=one_way_delay), DirectionModel.constant(one_way_delay))


def make_rng(seed: int | str | None, direction: str) -> random.Random:
    """Independent, reproducible generator per direction (string seeds hash stably)."""
    return random.Random(f"{seed}/{direction}") if seed is not None else random.Random()


@dataclass
class ChannelStats:
    """What a :class:`DelayLine` did. Every pushed packet is lost, queue-dropped or scheduled;
    duplicates add one scheduled copy each."""

    sent: int = 0
    lost: int = 0
    duplicated: int = 0
    queue_dropped: int = 0
    scheduled: int = 0
    capped: int = 0  # delays clipped to max_delay


class DelayLine:
    """Applies a :class:`DirectionModel` to a stream of packets, one decision per packet.

    Send times must be non-decreasing (they are on any real or virtual clock).

    Args:
        model: the impairments.
        rng: a ``random.Random`` (see :func:`make_rng`).
    """

    def __init__(self, model: DirectionModel, rng: random.Random) -> None:
        self.model = model
        self.rng = rng
        self.stats = ChannelStats()
        self._link_free_at = float("-inf")   # when the serialiser finishes its queue [s]
        self._last_delivery = float("-inf")  # for keep_order [s]
        self._bad: bool | None = None        # Gilbert state (loss_burst): losing every packet; None: not drawn yet

    def _lost(self) -> bool:
        """Whether the next packet is lost (one draw per packet, so seeded runs replay)."""
        model = self.model
        if model.loss_burst is None:
            return bool(model.loss) and self.rng.random() < model.loss
        if self._bad is None:
            # The chain starts in its stationary state, bad with probability `loss`. Started
            # good, it lost far less than asked over a session of a few bursts: --loss 0.9
            # --loss-burst 1e9 lost nothing, --loss 0.3 --loss-burst 100 about 75 % of 0.3.
            self._bad = self.rng.random() < model.loss
            return self._bad
        p, r = model.burst_transitions
        self._bad = self.rng.random() >= r if self._bad else self.rng.random() < p
        return self._bad

    def schedule(self, t_send: float, size: int) -> list[float]:
        """Delivery times of the packet sent at ``t_send`` [s], size in bytes ([] if lost)."""
        model, rng, stats = self.model, self.rng, self.stats
        stats.sent += 1
        if self._lost():
            stats.lost += 1
            return []
        copies = 1
        if model.duplicate and rng.random() < model.duplicate:
            copies = 2
            stats.duplicated += 1
        sigma = model.sigma
        max_delay = model.max_delay
        assert max_delay is not None   # DirectionModel.__post_init__ sets the default
        deliveries = []
        for _ in range(copies):
            # Drawn before the tail drop, which depends on timing (how full the queue is): a
            # copy dropped there skipped its draw, and every later packet's loss, duplicate and
            # delay came from shifted draws, so one seed gave other impairments when the
            # traffic came faster (netem: a burst at start-up changed the rest of the session).
            delay = rng.gauss(model.delay, sigma) if sigma > 0 else model.delay
            departure = t_send
            if model.rate_bps is not None:
                start = max(self._link_free_at, t_send)
                if start - t_send > model.queue_limit:
                    stats.queue_dropped += 1
                    continue
                self._link_free_at = start + 8.0 * size / model.rate_bps
                departure = self._link_free_at
            if delay > max_delay:
                delay = max_delay
                stats.capped += 1
            arrival = departure + max(delay, 0.0)
            if model.keep_order:
                arrival = max(arrival, self._last_delivery)
            self._last_delivery = max(self._last_delivery, arrival)
            deliveries.append(arrival)
        stats.scheduled += len(deliveries)
        return deliveries


@dataclass(frozen=True)
class Delivery:
    """A packet coming out of a :class:`VirtualLink` (times on the virtual clock [s])."""

    t_send: float
    t_deliver: float
    data: bytes

    @property
    def delay(self) -> float:
        return self.t_deliver - self.t_send


class VirtualLink:
    """One direction of the link on a virtual clock.

    Example (a trial stepping a virtual clock at 100 Hz)::

        link = VirtualLink(DirectionModel(delay=0.75), seed=1)
        for k in range(1000):
            now = k * 0.01
            link.push(now, operator_endpoint_bytes)
            for d in link.pop(now):
                robot.receive(d.data, arrival_time=d.t_deliver)

    Args:
        model: the impairments.
        seed: reproducibility seed (None = nondeterministic).
        direction: name mixed into the seed, so the two directions of one trial
            (same seed) draw independent numbers.
    """

    def __init__(self, model: DirectionModel, seed: int | str | None = None, direction: str = "forward") -> None:
        self.line = DelayLine(model, make_rng(seed, direction))
        self._heap: list[tuple[float, int, float, bytes]] = []
        self._order = itertools.count()  # ties deliver in push order

    @property
    def model(self) -> DirectionModel:
        return self.line.model

    @property
    def stats(self) -> ChannelStats:
        return self.line.stats

    def push(self, t_send: float, data: bytes) -> int:
        """Send ``data`` at virtual time ``t_send`` [s]; returns the number of copies scheduled."""
        deliveries = self.line.schedule(t_send, len(data))
        for t_deliver in deliveries:
            heapq.heappush(self._heap, (t_deliver, next(self._order), t_send, data))
        return len(deliveries)

    def pop(self, now: float) -> list[Delivery]:
        """Every packet whose delivery time is ≤ ``now``, in delivery order."""
        out = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            t_deliver, _, t_send, data = heapq.heappop(heap)
            out.append(Delivery(t_send, t_deliver, data))
        return out

    def next_delivery_time(self) -> float | None:
        """When the next packet comes out [s], for event-driven simulations."""
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        """Packets in flight."""
        return len(self._heap)
