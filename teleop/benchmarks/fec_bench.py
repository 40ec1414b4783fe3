"""Video forward error correction: frames kept over lossy links, by parity layout.

Each case sends ``frames`` video frames of N slices through one loss process of
:mod:`teleop.net.delay` (independent losses, or Gilbert runs of mean length ``loss_burst``)
and counts the frames the operator can rebuild, for three layouts of the same datagrams:

* ``none``: the N slices only (``teleop robot --video-fec 0``);
* ``consecutive``: one XOR parity after each run of G slices (RFC 5109's row FEC, and
  this product's wire version 1): a frame is lost to two losses in one group, so to most
  runs of two or more losses;
* ``interleaved``: ours (:mod:`teleop.video.wire`, version 2): slice i in group i mod K, the
  K parities after the slices; a run of up to K losses costs one datagram per group.

Both parity layouts cost the same 1/G more bytes. A frame survives when no group lost more
than one of its datagrams (slices and parity alike); the interleaved layout is also run
through the real sender and receiver (:func:`teleop.video.wire.packetize`,
:class:`teleop.video.receiver.VideoReceiver`), whose count must equal the rule's
(``receiver_agrees``). Each layout draws its own losses from the same seed, so each sees the
process as its own datagram count would.

Frame sizes: 8 slices (the robot view's 320×240 JPEG, ~9 KB) and 35 (640×480, ~40 KB) of
1,200-byte datagrams; G = 8 (the default).

Run: ``teleop bench fec [--quick] [--json]``.
"""

from __future__ import annotations

import random
from typing import Callable

from teleop.net.delay import DelayLine, DirectionModel
from teleop.video import wire

GROUP = wire.DEFAULT_FEC_GROUP
FRAME_SLICES = (8, 35)
#: (loss, mean run of losses or None for independent losses).
LOSS_CASES = ((0.01, None), (0.03, None), (0.01, 3.0), (0.03, 3.0), (0.05, 3.0), (0.03, 6.0))
LAYOUTS = ("none", "consecutive", "interleaved")
SEED = 1


def datagram_groups(layout: str, slices: int, group: int = GROUP) -> list[int]:
    """Parity group of each datagram of one frame, in sending order (-1: a slice without
    parity). Slices and their group's parity share the group number."""
    if layout == "none":
        return [-1] * slices
    if layout == "consecutive":
        order = []
        for g in range(wire.parity_groups(slices, group)):
            members = range(g * group, min((g + 1) * group, slices))
            order += [g] * len(members) + [g]          # the group's slices, then its parity
        return order
    if layout == "interleaved":
        return [wire.parity_group_of(i, slices, group) for i in range(slices)] + wire.parity_send_order(slices, group)
    raise ValueError(f"unknown layout {layout!r}; one of {', '.join(LAYOUTS)}")


def frame_survives(groups: list[int], lost: list[bool]) -> bool:
    """Whether a frame whose datagrams (of ``groups``, see :func:`datagram_groups`) were lost
    as ``lost`` says can be rebuilt: no slice lost without parity, no group short of two."""
    seen: dict[int, int] = {}
    for g, gone in zip(groups, lost):
        if gone:
            if g < 0:
                return False
            seen[g] = seen.get(g, 0) + 1
            if seen[g] > 1:
                return False
    return True


def _loss_draws(loss: float, burst: float | None) -> Callable[[int], list[bool]]:
    """A function drawing the next n datagrams' fates (True: lost) from one loss process."""
    line = DelayLine(DirectionModel(loss=loss, loss_burst=burst), random.Random(SEED))
    return lambda n: [not line.schedule(0.0, wire.DEFAULT_MAX_DATAGRAM_BYTES) for _ in range(n)]


def _received_through_the_wire(slices: int, loss: float, burst: float | None, frames: int) -> int:
    """Frames the real receiver completes when the real sender's interleaved datagrams meet
    the same loss process as the rule's ``interleaved`` count."""
    from teleop.video.receiver import VideoReceiver

    slice_bytes = wire.frame_slice_bytes(wire.DEFAULT_MAX_DATAGRAM_BYTES, 0, GROUP)
    payload = random.Random(SEED).randbytes(slices * slice_bytes - slice_bytes // 3)   # a short last slice
    draw = _loss_draws(loss, burst)
    with VideoReceiver(frame_timeout_s=1.0, max_frames_in_flight=4, decode=False, clock=lambda: 0.0) as receiver:
        for frame_id in range(frames):
            grams = list(wire.packetize(payload, stream_id=0, frame_id=frame_id, codec=1, capture_s=0.0,
                                        available_s=0.0, encode_end_s=0.0, send_clock=lambda: 0.0,
                                        fec_group=GROUP))
            for gram, gone in zip(grams, draw(len(grams))):
                if not gone:
                    receiver.handle_datagram(gram, 0.0)
        return receiver.stats.frames_completed


def run(quick: bool = False, progress: bool = False) -> dict:
    """Share of frames kept per (frame size, loss case, layout); see the module docstring."""
    import sys

    frames = 2_000 if quick else 20_000
    cases = []
    agrees = True
    for slices in FRAME_SLICES:
        for loss, burst in LOSS_CASES:
            kept = {}
            for layout in LAYOUTS:
                groups = datagram_groups(layout, slices)
                draw = _loss_draws(loss, burst)
                kept[layout] = sum(frame_survives(groups, draw(len(groups))) for _ in range(frames)) / frames
            through_wire = _received_through_the_wire(slices, loss, burst, frames) / frames
            agrees &= through_wire == kept["interleaved"]
            cases.append({"frame_datagrams": slices, "loss": loss, "loss_burst": burst, "kept": kept,
                          "interleaved_through_receiver": through_wire})
            if progress:
                print(f"fec: {slices} slices, loss {loss:g}" + (f" in runs of {burst:g}" if burst else "")
                      + " done", file=sys.stderr)
    return {"frames": frames, "group": GROUP, "overhead": 1.0 / GROUP, "layouts": list(LAYOUTS), "cases": cases,
            "receiver_agrees": agrees}


def format_table(result: dict) -> str:
    lines = [f"Video frames kept over a lossy link, {result['frames']} frames per case, parity 1 per "
             f"{result['group']} slices (+{100 * result['overhead']:.1f} % bytes)",
             f"{'slices':>6} {'loss':>5} {'runs of':>8} {'no parity':>10} {'consecutive':>12} {'interleaved':>12}"]
    for case in result["cases"]:
        kept = case["kept"]
        runs = f"{case['loss_burst']:g}" if case["loss_burst"] else "indep."
        lines.append(f"{case['frame_datagrams']:>6} {case['loss']:>5.2f} {runs:>8} {100 * kept['none']:>9.1f}% "
                     f"{100 * kept['consecutive']:>11.1f}% {100 * kept['interleaved']:>11.1f}%")
    lines.append("consecutive: RFC 5109 row parity (wire version 1); interleaved: ours (version 2), the same bytes. "
                 "The real receiver " + ("rebuilt exactly the frames the rule counts."
                                         if result["receiver_agrees"] else "DISAGREED with the rule: a bug."))
    return "\n".join(lines)
