"""Delay model on the virtual clock: statistics match the model, runs are reproducible."""

import math
import statistics

import pytest

from teleop.net.delay import THESIS_JITTER_RATIO, DirectionModel, LinkModel, VirtualLink, make_rng

N = 10_000
PERIOD = 0.01  # 100 Hz, the operator → robot stream rate (thesis §5.4.1)


def run(link, n=N, size=200):
    """Push n packets at 100 Hz, pop everything; returns the deliveries in delivery order."""
    for k in range(n):
        link.push(k * PERIOD, k.to_bytes(4, "big") + bytes(size - 4))
    deliveries = link.pop(math.inf)
    assert len(link) == 0
    return deliveries


def sequence(delivery):
    return int.from_bytes(delivery.data[:4], "big")


def test_thesis_delay_statistics():
    link = VirtualLink(DirectionModel(delay=0.75), seed=1)
    delays = [d.delay for d in run(link)]
    assert link.model.sigma == pytest.approx(0.1)  # (2/15) · 750 ms, Eq. 5.17
    assert statistics.fmean(delays) == pytest.approx(0.75, rel=0.05)
    assert statistics.stdev(delays) == pytest.approx(0.1, rel=0.05)
    # Tighter, at 5 standard errors of N = 10,000 samples (sigma / sqrt(N) = 1 ms for the
    # mean, sigma / sqrt(2 N) = 0.7 ms for the std), and Gaussian as Eq. 5.17 says: the
    # fractions within 1 and 2 sigma are 0.6827 and 0.9545 (4 binomial standard errors);
    # a uniform jitter of the same std would give 0.577 and 1.0.
    assert statistics.fmean(delays) == pytest.approx(0.75, abs=5 * 0.1 / math.sqrt(N))
    assert statistics.stdev(delays) == pytest.approx(0.1, abs=5 * 0.1 / math.sqrt(2 * N))
    for k, p in ((1, 0.6827), (2, 0.9545)):
        within = sum(abs(d - 0.75) <= k * 0.1 for d in delays) / N
        assert within == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / N)), (k, within)


def test_reordering_happens_unless_order_is_kept():
    deliveries = run(VirtualLink(DirectionModel(delay=0.5), seed=2))
    order = [sequence(d) for d in deliveries]
    assert sorted(order) == list(range(N))
    overtaken = sum(1 for a, b in zip(order, order[1:]) if b < a)
    assert overtaken > N // 10  # σ = 67 ms ≫ 10 ms spacing: packets overtake constantly

    kept = run(VirtualLink(DirectionModel(delay=0.5, keep_order=True), seed=2))
    assert [sequence(d) for d in kept] == list(range(N))
    assert all(b.t_deliver >= a.t_deliver for a, b in zip(kept, kept[1:]))


def test_constant_delay_is_exact():
    deliveries = run(VirtualLink(DirectionModel.constant(0.2), seed=3), n=100)
    assert all(d.delay == pytest.approx(0.2) for d in deliveries)


def test_loss_and_duplication_fractions():
    link = VirtualLink(DirectionModel(delay=0.1, loss=0.1, duplicate=0.05), seed=4)
    deliveries = run(link)
    # Binomial: 4 standard deviations of N·p.
    assert link.stats.lost == pytest.approx(0.1 * N, abs=4 * math.sqrt(N * 0.1 * 0.9))
    assert link.stats.duplicated == pytest.approx(0.05 * (N - link.stats.lost), abs=4 * math.sqrt(N * 0.05))
    assert len(deliveries) == N - link.stats.lost + link.stats.duplicated == link.stats.scheduled
    sequences = [sequence(d) for d in deliveries]
    assert len(sequences) - len(set(sequences)) == link.stats.duplicated


def _loss_runs(lost: list[bool]) -> list[int]:
    """Lengths of the runs of consecutive losses."""
    runs, current = [], 0
    for gone in lost + [False]:
        if gone:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs


def test_bursty_loss_has_its_rate_and_mean_run_length():
    """Gilbert model: the long-run loss rate is ``loss`` and losses come in runs of mean
    ``loss_burst`` (geometric); independent losses have runs of 1/(1 - loss)."""
    n = 200_000
    for burst, loss in ((3.0, 0.03), (10.0, 0.1), (1.0, 0.05)):
        link = VirtualLink(DirectionModel(loss=loss, loss_burst=burst), seed=2)
        lost = [not link.line.schedule(0.0, 100) for _ in range(n)]
        runs = _loss_runs(lost)
        assert sum(lost) / n == pytest.approx(loss, rel=0.1)
        assert statistics.fmean(runs) == pytest.approx(burst, rel=0.1)
    independent = VirtualLink(DirectionModel(loss=0.03), seed=2)
    runs = _loss_runs([not independent.line.schedule(0.0, 100) for _ in range(n)])
    assert statistics.fmean(runs) == pytest.approx(1 / 0.97, rel=0.02)


def test_bursty_loss_has_its_rate_over_a_short_session_too():
    """The chain started in its good state, so a session of a few bursts lost far less than
    asked: `--loss 0.9 --loss-burst 1e9` lost nothing, `--loss 0.3 --loss-burst 100` over a
    6 s demo (266 commands at 0.3) lost 169-236. Started in its stationary state, the rate
    over many short sessions is ``loss``."""
    def lost_share(loss: float, burst: float, packets: int, sessions: int) -> float:
        total = 0
        for seed in range(sessions):
            link = VirtualLink(DirectionModel(loss=loss, loss_burst=burst), seed=seed)
            total += sum(not link.line.schedule(0.0, 100) for _ in range(packets))
        return total / (packets * sessions)

    assert lost_share(0.9, 1e9, 50, 400) == pytest.approx(0.9, abs=0.05)
    assert lost_share(0.3, 100.0, 266, 1000) == pytest.approx(0.3, abs=0.045)   # (it was 0.23)


def test_independent_loss_draws_as_before():
    """Without loss_burst a seeded run loses the packets it always lost (trials reproducible
    across versions): one draw per packet, lost when below ``loss``."""
    model = DirectionModel(loss=0.2)
    link = VirtualLink(model, seed=9)
    rng = make_rng(9, "forward")
    expected = [rng.random() < 0.2 for _ in range(500)]
    assert [not link.line.schedule(0.0, 10) for _ in range(500)] == expected


def test_seed_reproducibility():
    model = DirectionModel(delay=0.3, loss=0.05, duplicate=0.05)
    first = [(d.t_deliver, d.data) for d in run(VirtualLink(model, seed=7), n=1000)]
    again = [(d.t_deliver, d.data) for d in run(VirtualLink(model, seed=7), n=1000)]
    other = [(d.t_deliver, d.data) for d in run(VirtualLink(model, seed=8), n=1000)]
    backward = [(d.t_deliver, d.data) for d in run(VirtualLink(model, seed=7, direction="backward"), n=1000)]
    assert first == again
    assert first != other and first != backward


def test_bandwidth_cap_serialises_and_tail_drops():
    # 1000-byte packets at 80 kbit/s take 0.1 s each; sent every 10 ms they queue up.
    link = VirtualLink(DirectionModel.constant(0.05, rate_bps=80_000, queue_limit=0.5), seed=5)
    deliveries = run(link, n=100, size=1000)
    times = [d.t_deliver for d in deliveries]
    assert times[0] == pytest.approx(0.0 + 0.1 + 0.05)
    assert all(b - a == pytest.approx(0.1) for a, b in zip(times, times[1:]))
    assert link.stats.queue_dropped > 0
    assert all(d.t_deliver - d.t_send <= 0.5 + 0.1 + 0.05 + 1e-9 for d in deliveries)


def test_delays_are_capped():
    link = VirtualLink(DirectionModel(delay=0.1, jitter=1.0, max_delay=0.3), seed=6)
    delays = [d.delay for d in run(link, n=1000)]
    assert max(delays) <= 0.3 + 1e-9 and min(delays) >= 0.0 and link.stats.capped > 0


def test_pop_returns_only_due_packets_in_order():
    link = VirtualLink(DirectionModel(delay=0.1), seed=9)
    for k in range(50):
        link.push(k * PERIOD, bytes([k]))
    due = link.pop(0.3)
    assert due and all(d.t_deliver <= 0.3 for d in due)
    assert [d.t_deliver for d in due] == sorted(d.t_deliver for d in due)
    assert link.next_delivery_time() > 0.3 and len(link) == 50 - len(due)


def test_thesis_link_model():
    model = LinkModel.thesis(0.75)
    assert model.forward.sigma == pytest.approx(THESIS_JITTER_RATIO * 0.75)
    assert model.backward.sigma == 0.0 and model.backward.delay == 0.75


def test_invalid_models_are_refused():
    for bad in (dict(delay=-1), dict(loss=1.5), dict(duplicate=-0.1), dict(rate_bps=0), dict(delay=20, max_delay=10),
                dict(loss=0.1, loss_burst=0.5), dict(loss=1.0, loss_burst=3), dict(loss=0.1, loss_burst=math.nan),
                dict(loss=0.1, loss_burst=math.inf)):
        with pytest.raises(ValueError):
            DirectionModel(**bad)
