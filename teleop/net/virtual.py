"""Endpoints on a virtual clock: the stations' network code path, faster than real time.

A :class:`VirtualEndpoint` has the same ``send``/``poll``/``stats``/``clock`` as
:class:`teleop.net.udp.UdpEndpoint` and runs the same encoding, MAC, replay filter and
clock-exchange code; only the transport differs: datagrams go through a
:class:`teleop.net.delay.VirtualLink` instead of a socket. A trial advances its
:class:`teleop.clock.VirtualClock` in fixed steps, and every ``poll`` returns what the link
delivered up to that time, with the link's delivery time as arrival time::

    clock = VirtualClock()
    operator, robot = connect_virtual(codec, LinkModel.thesis(0.75), clock, seed=3)
    for k in range(100_000):
        clock.set(k * 0.01)
        operator.send(refs[k], robot.address)
        for received in robot.poll():
            ...
"""

from __future__ import annotations

from typing import Any

from teleop.clock import Clock
from teleop.net.delay import LinkModel, VirtualLink
from teleop.net.protocol import PacketCodec
from teleop.net.udp import Address, PacketEndpoint, Received


class OffsetClock:
    """Another clock shifted by a constant: a station whose clock disagrees with the world."""

    def __init__(self, base: Clock, offset: float) -> None:
        self.base = base
        self.offset = offset

    def now(self) -> float:
        return self.base.now() + self.offset


class VirtualEndpoint(PacketEndpoint):
    """A station endpoint whose datagrams travel over :class:`VirtualLink` objects.

    Args:
        codec: packet codec holding the shared secret.
        name: this endpoint's address is ``(name, 0)``.
        clock: the virtual (world) clock; the links run on it.
        clock_offset: this station's clock minus the world clock [s], to simulate stations
            whose clocks disagree; ``self.clock`` (send stamps, arrival times) includes it.
        **kw: ``source_id``, ``window_size``, ``accept_types`` (see :class:`PacketEndpoint`).
    """

    def __init__(self, codec: PacketCodec, name: str, clock: Clock, *,
                 clock_offset: float = 0.0, **kw: Any) -> None:
        super().__init__(codec, OffsetClock(clock, clock_offset) if clock_offset else clock, **kw)
        self.world_clock = clock
        self.clock_offset = clock_offset
        self.address: Address = (name, 0)
        self._outgoing: dict[Address, VirtualLink] = {}
        self._incoming: list[tuple[VirtualLink, Address]] = []

    def link_to(self, peer: "VirtualEndpoint", link: VirtualLink) -> None:
        """Route datagrams sent to ``peer.address`` through ``link`` (one direction)."""
        self._outgoing[peer.address] = link
        peer._incoming.append((link, self.address))

    def datagrams_lost(self) -> int:
        """Datagrams this endpoint sent that its links lost (the model's decisions)."""
        return sum(link.stats.lost for link in self._outgoing.values())

    def _transmit(self, data: bytes, peer: Address) -> str | None:
        link = self._outgoing.get(tuple(peer))
        if link is None:
            return "EHOSTUNREACH"  # what a socket would say about an address with no route
        link.push(self.world_clock.now(), data)
        return None

    def poll(self, timeout: float = 0.0, max_packets: int | None = None) -> list[Received]:
        """Accepted packets delivered up to the clock's current time, in delivery order.

        ``timeout`` and ``max_packets`` exist for interface compatibility: a virtual clock
        never blocks (the trial advances it), and nothing can flood a simulation.
        """
        now = self.world_clock.now()
        deliveries = sorted(((d, peer) for link, peer in self._incoming for d in link.pop(now)),
                            key=lambda item: item[0].t_deliver)
        accepted = []
        for delivery, peer in deliveries:
            received = self._accept(delivery.data, peer, delivery.t_deliver + self.clock_offset)
            if received is not None:
                accepted.append(received)
        return accepted


def connect_virtual(codec: PacketCodec, model: LinkModel, clock: Clock,
                    seed: int | str | None = None, robot_clock_offset: float = 0.0,
                    ) -> tuple[VirtualEndpoint, VirtualEndpoint]:
    """(operator, robot) endpoints joined by the two directions of ``model``.

    Forward = operator → robot, backward = robot → operator; both directions draw from
    independent streams derived from ``seed``. The operator's clock is the world clock;
    the robot's is ``robot_clock_offset`` seconds ahead of it.
    """
    operator = VirtualEndpoint(codec, "operator", clock)
    robot = VirtualEndpoint(codec, "robot", clock, clock_offset=robot_clock_offset)
    operator.link_to(robot, VirtualLink(model.forward, seed=seed, direction="forward"))
    robot.link_to(operator, VirtualLink(model.backward, seed=seed, direction="backward"))
    return operator, robot
