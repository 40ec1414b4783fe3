"""`teleop bench fec`: its survival rule is the real receiver's, and its layouts are the
ones it names (interleaved: what wire.packetize sends)."""

from __future__ import annotations

import json

import pytest

from teleop.benchmarks import fec_bench
from teleop.cli import main
from teleop.video import wire


def test_interleaved_groups_are_the_order_the_sender_sends():
    for slices in (1, 5, 8, 9, 35):
        grams = list(wire.packetize(bytes(slices * 1000), stream_id=0, frame_id=0, codec=1, capture_s=0.0,
                                    available_s=0.0, encode_end_s=0.0, send_clock=lambda: 0.0,
                                    max_datagram_bytes=1000 + wire.HEADER_BYTES + wire.PARITY_PREFIX.size,
                                    fec_group=fec_bench.GROUP))
        headers = [wire.parse(g)[0] for g in grams]
        sent = [h.chunk_index if h.is_parity else wire.parity_group_of(h.chunk_index, slices, fec_bench.GROUP)
                for h in headers]
        assert sent == fec_bench.datagram_groups("interleaved", slices)


def test_the_layouts_and_the_survival_rule():
    assert fec_bench.datagram_groups("none", 3) == [-1, -1, -1]
    assert fec_bench.datagram_groups("consecutive", 10, group=4) == [0] * 5 + [1] * 5 + [2] * 3
    assert fec_bench.datagram_groups("interleaved", 10, group=4) == [0, 1, 2] * 3 + [0] + [1, 2, 0]
    groups = fec_bench.datagram_groups("consecutive", 10, group=4)
    two_in_a_row = [False] * 13
    two_in_a_row[1] = two_in_a_row[2] = True
    assert not fec_bench.frame_survives(groups, two_in_a_row)                 # one group: lost
    assert fec_bench.frame_survives(fec_bench.datagram_groups("interleaved", 10, group=4), two_in_a_row)
    assert not fec_bench.frame_survives([-1, -1], [False, True])             # no parity: any loss
    with pytest.raises(ValueError, match="unknown layout"):
        fec_bench.datagram_groups("diagonal", 4)


@pytest.mark.parametrize("slices, loss, burst", [(35, 0.05, 3.0), (8, 0.1, None)])
def test_the_rule_counts_exactly_the_frames_the_real_receiver_rebuilds(slices, loss, burst, monkeypatch):
    frames = 300
    groups = fec_bench.datagram_groups("interleaved", slices)
    draw = fec_bench._loss_draws(loss, burst)
    by_rule = sum(fec_bench.frame_survives(groups, draw(len(groups))) for _ in range(frames))
    through_wire = fec_bench._received_through_the_wire(slices, loss, burst, frames)
    assert 0.5 * frames < by_rule < frames          # the link lost frames, and parity kept most
    assert through_wire == by_rule


def test_bench_fec_prints_a_table_and_json(capsys, monkeypatch):
    monkeypatch.setattr(fec_bench, "LOSS_CASES", ((0.03, 3.0),))
    monkeypatch.setattr(fec_bench, "FRAME_SLICES", (35,))
    assert main(["bench", "fec", "--quick", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["receiver_agrees"] is True and result["frames"] == 2000
    [case] = result["cases"]
    kept = case["kept"]
    # Runs of losses: interleaving keeps clearly more frames than consecutive groups, at the same bytes.
    assert kept["none"] < kept["consecutive"] < kept["interleaved"] - 0.05
    assert main(["bench", "fec", "--quick"]) == 0
    assert "interleaved" in capsys.readouterr().out
