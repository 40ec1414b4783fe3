"""Adversarial scenarios for the network layer: the clock exchange under asymmetric delays,
route changes, drifting and stepping clocks, lost/duplicated/reordered/replayed pongs; the
watchdog under command bursts around its timeout; the delay model's and netem's seeded
reproducibility, bandwidth cap and bounds. Real components throughout, on virtual clocks
where they support one, on loopback sockets otherwise (no assertion on wall-clock time)."""

import random
import select
import socket
import time

import numpy as np
import pytest

from teleop.clock import VirtualClock
from teleop.net.clock_sync import ClockOffsetEstimator, ClockSyncClient, answer_ping
from teleop.net.delay import DelayLine, DirectionModel, LinkModel, VirtualLink, make_rng
from teleop.net.netem import NetemProxy
from teleop.net.packet_filter import ReplayWindow
from teleop.net.protocol import ClockPong, PacketCodec, PacketType
from teleop.net.virtual import OffsetClock, VirtualEndpoint
from teleop.net.watchdog import HOLDING_STATES, StaleCommandWatchdog, WatchdogState, minimum_jerk

CODEC = PacketCodec(b"adversarial-test-secret-0123456")
TICK = 0.01
#: The robot station's clock settings (RobotStationConfig): the median of 128 exchanges 0.25 s apart.
WINDOW, PING_INTERVAL = 128, 0.25


# --------------------------------------------------------------------------- clock exchange
def _endpoints(clock, model, seed, operator_offset=1e-9, robot_offset=3.0):
    """(operator, robot) virtual endpoints whose clocks are offset from the world's by amounts
    the test may change as it runs (:func:`_set_offset`): drift, steps."""
    operator = VirtualEndpoint(CODEC, "operator", clock, clock_offset=operator_offset)
    robot = VirtualEndpoint(CODEC, "robot", clock, clock_offset=robot_offset)
    operator.link_to(robot, VirtualLink(model.forward, seed=seed, direction="forward"))
    robot.link_to(operator, VirtualLink(model.backward, seed=seed, direction="backward"))
    assert isinstance(operator.clock, OffsetClock) and isinstance(robot.clock, OffsetClock)
    return operator, robot


def _set_offset(endpoint, offset):
    """This station's clock minus the world's, from now on (its stamps and arrival times)."""
    endpoint.clock_offset = offset
    endpoint.clock.offset = offset


def _robot_pings_operator(seed, seconds, model=None, robot_offset=lambda t: 3.0, operator_offset=lambda t: 0.0,
                          on_tick=None):
    """The robot station's clock exchange (it pings the operator, median of 128) over ``model``
    (default: the thesis link at 750 ms). Returns the client and [(t, error of the estimate of
    operator − robot clock)] per tick once it has one, and the ticks that sent a ping."""
    clock = VirtualClock()
    operator, robot = _endpoints(clock, model or LinkModel.thesis(0.75), seed)
    client = ClockSyncClient(robot, operator.address, interval=PING_INTERVAL,
                             estimator=ClockOffsetEstimator(WINDOW, "median"))
    errors, pings = [], []
    for k in range(int(round(seconds / TICK))):
        t = k * TICK
        clock.set(t)
        _set_offset(robot, robot_offset(t))
        _set_offset(operator, operator_offset(t) or 1e-9)
        if on_tick is not None:
            on_tick(t, operator, robot, client)
        if client.tick():
            pings.append(t)
        for received in operator.poll():
            answer_ping(operator, received)
        for received in robot.poll():
            client.handle(received)
        if client.estimator.offset is not None:
            true = operator_offset(t) - robot_offset(t)
            errors.append((t, client.estimator.offset - true))
    return client, errors, pings


def _errors_after(errors, t0):
    return np.array([e for t, e in errors if t >= t0])


@pytest.mark.parametrize("side", ["robot", "operator"])
def test_the_offset_follows_a_100_ppm_drift_on_either_side_within_the_documented_accuracy(side):
    """100 ppm (twice the 50 ppm the station's window is sized for) on either clock, over the
    thesis link: the 32 s median window lags 16 s × 100 ppm = 1.6 ms, on top of the ~5 ms of
    the jitter; every reading after 30 s stays within 20 ms (documented: 5 ms RMS, 14 ms at worst)."""
    drift = lambda t: 100e-6 * t  # noqa: E731
    finals = []
    for seed in range(3):
        kwargs = {"robot_offset": lambda t: 3.0 + drift(t)} if side == "robot" else {"operator_offset": drift}
        _, errors, _ = _robot_pings_operator(seed, 45.0, **kwargs)
        late = _errors_after(errors, 30.0)
        assert np.max(np.abs(late)) < 0.020, (seed, np.max(np.abs(late)))
        finals.append(late[-1])
    assert float(np.sqrt(np.mean(np.square(finals)))) < 0.010


def test_a_constant_asymmetry_shows_as_half_its_size_and_the_round_trip_stays_right():
    """600 ms one way, 100 ms back (the README's case): no two-way exchange can tell an offset
    from an asymmetry, so the estimate is off by (d_f − d_b)/2 = 250 ms, within the rtt/2
    bound; the two one-way delays measured with it still sum to the true round trip."""
    model = LinkModel(DirectionModel.constant(0.6), DirectionModel.constant(0.1))
    client, errors, _ = _robot_pings_operator(0, 10.0, model=model)
    estimator = client.estimator
    # The pongs ride the forward link (operator → robot): the estimate of operator − robot
    # reads low by half the asymmetry.
    assert errors[-1][1] == pytest.approx(-(0.6 - 0.1) / 2, abs=0.011)
    assert abs(errors[-1][1]) <= estimator.max_error + 1e-9
    # τ_f measured with the estimate plus τ_b measured with it: the true 0.7 s, whatever the bias.
    offset = estimator.offset                     # operator − robot, as estimated
    # A command stamped 10 s (operator clock = world) arrives at world 10.6 s, robot clock 13.6 s.
    tau_f = (13.6 + offset) - 10.0
    # A frame captured at robot clock 13 s (world 10 s) is shown at operator clock 10.1 s;
    # the robot station's τ̂_b is that raw age minus the offset (RobotStation.tau_b).
    tau_b = (10.1 - 13.0) - offset
    assert tau_f + tau_b == pytest.approx(0.7, abs=0.011)


def test_a_route_change_of_both_directions_leaves_the_estimate_within_its_accuracy():
    """At 30 s both directions fall from 750 to 300 ms (a route change; the forward one keeps
    its thesis jitter): the median stays unbiased through the change, as the medians of the
    two one-way delays change together."""
    def reroute(t, operator, robot, client):
        if t == 30.0:
            operator._outgoing[robot.address].line.model = DirectionModel(delay=0.3)
            robot._outgoing[operator.address].line.model = DirectionModel.constant(0.3)

    _, errors, _ = _robot_pings_operator(1, 60.0, on_tick=reroute)
    assert np.max(np.abs(_errors_after(errors, 20.0))) < 0.020


def test_a_responder_clock_step_is_followed_once_the_window_has_turned_over():
    """The operator's clock steps 0.5 s forward at 20 s: the median switches over half a window
    (16 s) later and is back within 20 ms once the window holds only exchanges after the step
    (32 s). Before that it is documented to lag: no assertion there but that it is finite."""
    _, errors, _ = _robot_pings_operator(2, 20.0 + 32.0 + 4.0,
                                         operator_offset=lambda t: 0.5 if t >= 20.0 else 0.0)
    assert np.all(np.isfinite(_errors_after(errors, 0.0)))
    assert np.max(np.abs(_errors_after(errors, 20.0 + 32.0 + 2.0))) < 0.020


def test_the_pinger_keeps_pinging_when_its_own_clock_steps_back():
    """The robot's clock steps 5 s back at 20 s. The client kept the next ping's time on the
    old clock, and sent no ping for 5 s (an hour's step: an hour), while the estimate needed
    new exchanges to follow the step. It pings on schedule, and the estimate recovers as
    after any step (within 20 ms once the window has turned over)."""
    robot_offset = lambda t: 3.0 - (5.0 if t >= 20.0 else 0.0)  # noqa: E731
    client, errors, pings = _robot_pings_operator(3, 20.0 + 32.0 + 4.0, robot_offset=robot_offset)
    after = [t for t in pings if 20.0 <= t < 25.0]
    assert len(after) >= 19, after              # every 0.25 s, not none for 5 s
    gaps = np.diff(pings)
    assert np.max(gaps) <= PING_INTERVAL + TICK + 1e-9
    assert client.estimator.rejected >= 1       # the exchanges astride the step: negative RTT
    assert np.max(np.abs(_errors_after(errors, 20.0 + 32.0 + 2.0))) < 0.020


def test_lost_duplicated_and_reordered_pongs_count_each_exchange_once():
    """30 % loss and 30 % duplication both ways over the thesis jitter (pongs overtake each
    other): each completed exchange is one sample, duplicates of pings are answered once and
    duplicates of pongs not counted again, and the estimate stays within its rtt/2 bound and
    a few standard errors of the truth."""
    model = LinkModel(DirectionModel(delay=0.75, loss=0.3, duplicate=0.3),
                      DirectionModel.constant(0.75, loss=0.3, duplicate=0.3))
    added, robots = [], []

    def count_pongs(t, operator, robot, client):
        if t == 0.0:     # record what the client feeds its estimator
            robots.append(robot)
            original = client.estimator.add
            client.estimator.add = lambda *times: added.append(times) or original(*times)

    client, errors, pings = _robot_pings_operator(4, 40.0, model=model, on_tick=count_pongs)
    estimator = client.estimator
    exchanges = [t1 for t1, _, _, _ in added]
    assert len(exchanges) == len(set(exchanges))                # no exchange twice
    assert 0.3 * len(pings) < len(added) < 0.7 * len(pings)     # ~0.7 × 0.7 of them complete
    # Every pong the filter accepted is counted once; its duplicates were refused as replayed.
    assert robots[0].stats.rx.accepted_by_type["clock_pong"] == len(added)
    assert robots[0].stats.rx.dropped["replayed"] > 0
    assert estimator.rejected == 0
    error = errors[-1][1]
    assert abs(error) <= estimator.max_error
    # Duplicated pongs count at their first arrival, the faster of two jittered copies: a
    # small bias towards a faster forward direction on top of the median's noise.
    assert abs(error) < 0.040


def test_a_pong_replayed_from_an_earlier_session_does_not_pair_with_our_ping():
    """Session 1: the robot's clock exchange with the operator, captured on the wire. Session
    2 (the robot restarted: a new source id, exchange ids from 1 again, the same secret): an
    attacker replays each captured pong as soon as the robot sends the ping of its id,
    spoofing the operator's address, faster than the genuine pong. The replay filter cannot
    know session 1's streams; the client paired the replayed pong with its own t1, and the
    old t2, t3 moved the offset by the 100 s between the sessions. It checks the echoed t1."""
    model = LinkModel.thesis(0.75)
    clock = VirtualClock()
    operator, robot = _endpoints(clock, model, seed=5)
    captured = {}
    forward = operator._outgoing[robot.address]
    push = forward.push

    def tap(t_send, data):      # an eavesdropper on the forward path
        packet = CODEC.decode(data)
        if packet.packet_type == PacketType.CLOCK_PONG:
            captured[packet.message.exchange_id] = data
        return push(t_send, data)

    forward.push = tap
    client = ClockSyncClient(robot, operator.address, interval=PING_INTERVAL,
                             estimator=ClockOffsetEstimator(16, "median"))
    for k in range(2000):
        clock.set(k * TICK)
        client.tick()
        for received in operator.poll():
            answer_ping(operator, received)
        for received in robot.poll():
            client.handle(received)
    assert len(captured) > 70

    # Session 2, 100 s later: a new robot process (new endpoint, new client), same operator.
    clock.set(120.0)
    robot2 = VirtualEndpoint(CODEC, "robot", clock, clock_offset=3.0)
    operator2 = VirtualEndpoint(CODEC, "operator", clock, clock_offset=1e-9)
    operator2.link_to(robot2, VirtualLink(model.forward, seed=6, direction="forward"))
    robot2.link_to(operator2, VirtualLink(model.backward, seed=6, direction="backward"))
    attacker = VirtualLink(DirectionModel.constant(0.0))          # from the operator's address
    robot2._incoming.append((attacker, operator2.address))
    client2 = ClockSyncClient(robot2, operator2.address, interval=PING_INTERVAL,
                              estimator=ClockOffsetEstimator(16, "median"))
    replayed = 0
    for k in range(1500):
        clock.set(120.0 + k * TICK)
        if client2.tick():
            exchange_id = next(reversed(client2._outstanding))
            if exchange_id in captured:
                attacker.push(clock.now(), captured[exchange_id])
                replayed += 1
        for received in operator2.poll():
            answer_ping(operator2, received)
        for received in robot2.poll():
            client2.handle(received)
    assert replayed > 40
    assert robot2.stats.rx.accepted_by_type["clock_pong"] > replayed   # the filter let them in
    # Operator − robot clock is −3 s: the genuine exchanges' median, not the replayed ones'.
    assert client2.estimator.offset == pytest.approx(-3.0, abs=0.06)
    assert all(abs(s.offset + 3.0) < 0.5 for s in client2.estimator.samples)


def test_absurd_pong_stamps_do_not_move_the_median_beyond_one_sample():
    """A pong (authentic: a peer's broken clock) with a send time far in the future has a
    negative RTT and is rejected; one far in the past passes (positive RTT) as one wild sample
    among 16, which the median outvotes and the min-RTT filter never picks."""
    estimator = ClockOffsetEstimator(16, "median")
    rng = random.Random(9)
    for k in range(15):
        t1 = 100.0 + k
        d_f, d_b = rng.gauss(0.75, 0.1), 0.75
        estimator.add(t1, t1 + d_f + 3.0, t1 + d_f + 3.001, t1 + d_f + 0.001 + d_b)
    before = estimator.offset
    assert estimator.add(200.0, 203.75, 1e300, 201.5) is None           # future: rtt < 0
    assert estimator.add(200.0, 203.75, 1.7e308, 201.5) is None
    wild = estimator.add(200.0, 203.75, -1e300, 201.5)                  # past: accepted
    assert wild is not None and np.isfinite(wild.offset)
    assert estimator.offset == pytest.approx(before, abs=0.1)
    assert estimator.min_rtt_offset == pytest.approx(3.0, abs=0.2)
    assert estimator.rejected == 2


# --------------------------------------------------------------------------- watchdog
def _mix(status, hold, commanded):
    """The robot station's output (see the watchdog's docstring): hold while WAITING/STALE,
    blend while RESUMING, the commands while ACTIVE."""
    if status.state in HOLDING_STATES:
        return hold
    return (1.0 - status.blend) * hold + status.blend * commanded


def test_a_burst_after_an_outage_in_mid_resume_restarts_the_resume_from_the_new_hold():
    """RESUMING, the link stalls 0.6 s, then three queued commands arrive within one tick:
    the update goes RESUMING → STALE → RESUMING, and says so only by ``went_stale``: the
    state is unchanged (``changed`` is False, the contract tests/test_fuzz_live_path.py
    pins). A new resume, from a new hold pose, blend 0. NB the robot station sets a resume's
    length (resume_duration_for) only on ``changed``: see the report of this review."""
    clock = VirtualClock()
    watchdog = StaleCommandWatchdog(clock, timeout=0.3, resume_duration=2.0, resume_after=3)
    for k in range(50):
        clock.set(k * TICK)
        watchdog.command_received()
        status = watchdog.update()
    assert status.state == WatchdogState.RESUMING and 0.0 < status.blend < 1.0
    clock.set(1.1)
    for _ in range(3):
        watchdog.command_received()
    status = watchdog.update()
    assert status.went_stale and status.state == WatchdogState.RESUMING and status.blend == 0.0
    assert not status.changed and status.previous is None
    assert watchdog.stale_events == 1


@pytest.mark.parametrize("seed", range(6))
def test_bursts_around_the_timeout_keep_the_output_continuous_and_fail_safe(seed):
    """Commands in bursts whose gaps sit just under, at, and just over the stale timeout
    (binary fractions, so "at" is exact), with reordered arrival reports and long holds. At
    every tick: the robot holds once the newest command is older than the timeout; the
    output mixed as the station does never jumps (the hold pose is captured when the
    watchdog goes stale, each resume ramps from it along the minimum-jerk profile); every
    new resume starts at blend 0 and is reported (a change of state, or ``went_stale``);
    a gap of exactly the timeout is no outage."""
    rng = random.Random(seed)
    dt, timeout, resume = 1 / 128, 0.25, 0.5
    clock = VirtualClock()
    watchdog = StaleCommandWatchdog(clock, timeout=timeout, resume_duration=resume, resume_after=3)
    # Arrival times: bursts of 1..5 commands, the gaps between bursts around the timeout.
    arrivals, t = [], 0.5
    while t < 40.0:
        gap = rng.choice([timeout - dt, timeout, timeout + dt, timeout + 2 * dt, dt, 2 * dt, 3.0, 20.0 * rng.random()])
        t += gap
        arrivals += [t] * rng.randint(1, 5)
    commanded_at = lambda t: np.array([np.sin(0.7 * t), 2.0 + np.cos(0.3 * t)])  # noqa: E731
    hold, executed = np.zeros(2), np.zeros(2)
    index, last_arrival = 0, -np.inf
    peak_step = 1.875 * dt / resume * 4.0 + 0.7 * dt * 2     # blend slope × |gap| (≤ 4) + command speed
    state = WatchdogState.WAITING
    for k in range(int(45.0 / dt)):
        now = k * dt
        clock.set(now)
        batch = []
        while index < len(arrivals) and arrivals[index] <= now:
            batch.append(arrivals[index])
            index += 1
        rng.shuffle(batch)   # reports of one poll out of arrival order
        for arrival in batch:
            watchdog.command_received(arrival)
            last_arrival = max(last_arrival, arrival)
        status = watchdog.update()
        if status.went_stale:
            hold = executed.copy()
        if status.state == WatchdogState.RESUMING and (state != WatchdogState.RESUMING or status.went_stale):
            # A new resume (from WAITING, STALE, or through STALE within this update): from
            # blend 0, said by a change of state or by went_stale.
            assert (status.changed or status.went_stale) and status.blend == 0.0, (now, state, status)
        state = status.state
        if now - last_arrival > timeout:
            assert status.state in HOLDING_STATES, (now, last_arrival, status)
        assert 0.0 <= status.blend <= 1.0
        new = _mix(status, hold, commanded_at(now))
        assert np.max(np.abs(new - executed)) <= peak_step or k == 0, (now, status, executed, new)
        executed = new
    # A gap of exactly the timeout is not an outage (gaps "≤ timeout").
    clock2 = VirtualClock()
    exact = StaleCommandWatchdog(clock2, timeout=timeout, resume_duration=0.0, resume_after=1)
    for k in range(6):
        clock2.set(k * timeout)
        exact.command_received()
        assert exact.update().state == WatchdogState.ACTIVE
    assert exact.stale_events == 0


def test_resume_after_a_long_hold_blends_from_the_hold_pose():
    """An hour's hold, then commands far from the held pose: the blend starts at 0 and
    follows the minimum-jerk profile from the first resuming tick, never a jump."""
    clock = VirtualClock()
    watchdog = StaleCommandWatchdog(clock, timeout=0.3, resume_duration=1.0, resume_after=3)
    for k in range(100):
        clock.set(k * TICK)
        watchdog.command_received()
        watchdog.update()
    clock.set(3600.0)
    assert watchdog.update().state == WatchdogState.STALE
    blends = []
    for k in range(150):
        clock.set(3600.0 + k * TICK)
        watchdog.command_received()
        status = watchdog.update()
        if status.state != WatchdogState.STALE:
            blends.append((clock.now(), status.blend))
    start = blends[0][0]
    assert blends[0][1] == 0.0
    for t, blend in blends:
        assert blend == pytest.approx(minimum_jerk(t - start), abs=1e-12)
    assert np.max(np.abs(np.diff([b for _, b in blends]))) <= 1.875 * TICK + 1e-12


# --------------------------------------------------------------------------- replay window, sequences
def test_the_replay_window_matches_a_reference_model_near_the_top_of_the_sequence_space():
    """Random reordering, duplicates and jumps near 1, 2**63 and 2**64 − 1: each sequence
    number accepted once, refused as too old exactly when it is a window or more behind."""
    for trial in range(60):
        rng = random.Random(trial)
        size = rng.choice([1, 2, 64, 1024])
        base = rng.choice([1, 2**63, 2**64 - 6000])
        window, seen, highest = ReplayWindow(size), set(), 0
        for _ in range(1500):
            seq = base + max(0, highest - base + rng.randint(-size - 2, 4)) if highest and rng.random() < 0.8 \
                else base + rng.randint(0, 5000)
            if not 0 < seq < 2**64:
                continue
            expected = None if seq > highest else "too_old" if highest - seq >= size else \
                "replayed" if seq in seen else None
            assert window.check_and_update(seq) == expected, (trial, seq, highest)
            if expected is None:
                seen.add(seq)
                highest = max(highest, seq)


def test_a_restarted_operator_is_accepted_and_its_earlier_session_is_not_replayable():
    """An operator restarted 300 times while the robot runs (a new source id each time,
    sequence numbers from 1 again, well past the robot filter's 256 tracked streams): every
    session's packets are accepted once, in any interleaving; every packet of an earlier
    session already received is refused when replayed, evicted streams included."""
    from retarget.references import FLAT_SIZE, RobotReferences
    from teleop.net.packet_filter import PacketFilter

    rng = random.Random(1)
    robot = PacketFilter(CODEC, window_size=64)
    delivered = []
    for session in range(300):
        source = 1000 + session
        data = [CODEC.encode(RobotReferences.from_flat(0.01 * k, np.zeros(FLAT_SIZE)), source_id=source,
                             stream_id=1, seq=k, send_time=0.01 * k) for k in range(1, 6)]
        rng.shuffle(data)
        for datagram in data:
            assert robot.accept(datagram) is not None
        delivered += data
    for datagram in rng.sample(delivered, 300):
        assert robot.accept(datagram) is None
    assert robot.stats.dropped["replayed"] + robot.stats.dropped["too_old"] == 300


# --------------------------------------------------------------------------- delay model, netem
def _fates(line, times, size=1000):
    return [tuple(round(d - t, 9) for d in line.schedule(t, size)) for t in times]


def test_one_seed_gives_the_same_impairments_whatever_the_timing_under_a_bandwidth_cap():
    """Same seed, same packets; once sent spaced out, once after a burst the bandwidth cap
    tail-drops. The burst's own drops depend on timing; the loss, duplication and delay of
    every later packet must not. A copy dropped at the queue skipped its delay draw, and 62
    of the next 180 loss decisions differed (netem: a burst at start-up changed the session)."""
    model = DirectionModel(delay=0.05, jitter=0.01, loss=0.2, duplicate=0.1, rate_bps=80_000, queue_limit=0.05)
    spaced = [0.2 * i for i in range(200)]
    burst = [0.0] * 20 + [10.0 + 0.2 * i for i in range(180)]
    calm_line, burst_line = DelayLine(model, make_rng(7, "forward")), DelayLine(model, make_rng(7, "forward"))
    calm, bursty = _fates(calm_line, spaced), _fates(burst_line, burst)
    assert burst_line.stats.queue_dropped > calm_line.stats.queue_dropped   # the burst was cut
    assert calm[20:] == bursty[20:]
    # Through the virtual link too (the trials' path), packet by packet.
    a, b = VirtualLink(model, seed=3), VirtualLink(model, seed=3)
    fates_a = [a.push(t, bytes(1000)) for t in spaced]
    fates_b = [b.push(t, bytes(1000)) for t in burst]
    assert fates_a[20:] == fates_b[20:]


def test_the_bandwidth_cap_serialises_a_burst_and_tail_drops_beyond_the_queue_limit():
    """1000 datagrams of 1250 bytes at once over 1 Mbit/s (10 ms each) with a 0.5 s queue:
    the first 51 go (the 51st waits exactly 0.5 s), spaced exactly 10 ms apart, the rest are
    dropped; jitter on top reorders them, ``keep_order`` does not."""
    line = DelayLine(DirectionModel.constant(0.1, rate_bps=1e6, queue_limit=0.5), make_rng(0, "forward"))
    deliveries = [line.schedule(5.0, 1250) for _ in range(1000)]
    kept = [d[0] for d in deliveries if d]
    assert len(kept) == 51 and line.stats.queue_dropped == 949
    assert np.allclose(np.diff(kept), 0.01) and kept[0] == pytest.approx(5.0 + 0.01 + 0.1)
    jittery = DelayLine(DirectionModel(delay=0.1, jitter=0.02, rate_bps=1e6, queue_limit=0.5), make_rng(0, "f"))
    ordered = DelayLine(DirectionModel(delay=0.1, jitter=0.02, rate_bps=1e6, queue_limit=0.5, keep_order=True),
                        make_rng(0, "f"))
    loose = [jittery.schedule(5.0, 1250)[0] for _ in range(40)]
    tight = [ordered.schedule(5.0, 1250)[0] for _ in range(40)]
    assert loose != sorted(loose) and tight == sorted(tight)


def _udp():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    return sock


def _through_proxy(schedule, forward, seed, max_pending=100_000):
    """Send datagram i at offset ``schedule[i]`` [s] through a proxy stepped in this thread;
    returns (how many copies of each index reached the target, the proxy's forward stats, the
    proxy's largest number of queued datagrams)."""
    target, client = _udp(), _udp()
    proxy = NetemProxy("127.0.0.1:0", target.getsockname(), forward, DirectionModel.constant(0.0), seed=seed,
                       max_pending=max_pending)
    copies = [0] * len(schedule)
    peak = 0
    try:
        start, sent = time.monotonic(), 0
        deadline = start + 20.0          # a guard against never, not a timing check
        while time.monotonic() < deadline:
            now = time.monotonic() - start
            while sent < len(schedule) and schedule[sent] <= now:
                client.sendto(sent.to_bytes(4, "big"), proxy.listen_address)
                sent += 1
            proxy.step(0.002)
            peak = max(peak, proxy.pending)
            while select.select([target], [], [], 0)[0]:
                copies[int.from_bytes(target.recv(64)[:4], "big")] += 1
            stats = proxy.forward_stats
            if sent == len(schedule) and stats.received == sent and proxy.pending == 0:
                break
        while select.select([target], [], [], 0.05)[0]:
            copies[int.from_bytes(target.recv(64)[:4], "big")] += 1
        return copies, proxy.forward_stats, peak
    finally:
        proxy.close()
        target.close()
        client.close()


def test_netem_with_one_seed_loses_and_duplicates_the_same_datagrams_whatever_the_timing():
    """The real proxy on loopback: 150 datagrams all at once, or 2 ms apart: with one seed the
    same datagrams are lost and the same ones duplicated (the decisions go by datagram, in
    order, not by time)."""
    forward = DirectionModel(delay=0.0, jitter=0.0, loss=0.3, duplicate=0.3)
    at_once, stats_a, _ = _through_proxy([0.0] * 150, forward, seed=11)
    spaced, stats_b, _ = _through_proxy([0.002 * i for i in range(150)], forward, seed=11)
    assert stats_a.received == stats_b.received == 150 and not stats_a.kernel_dropped
    assert at_once == spaced
    assert 0 in at_once and 2 in at_once


def test_netem_under_a_bandwidth_cap_keeps_the_later_fates_of_a_seed_after_a_burst():
    """The proxy with a bandwidth cap, a short queue and jitter: a burst of 30 at start-up fills the
    queue (tail drops), then 40 datagrams 10 ms apart; the same seed with the first 30 spread
    out drops none at the queue. The later 40 lose and duplicate the same datagrams."""
    # 4-byte datagrams: 0.5 ms each; the queue holds 10 (a burst of 30 overflows it, a stall
    # of this loaded test bunching a few of the later ones does not).
    forward = DirectionModel(delay=0.002, jitter=0.0005, loss=0.25, duplicate=0.25, rate_bps=64_000,
                             queue_limit=0.005)
    later = [0.4 + 0.01 * i for i in range(40)]
    bursty, stats_a, _ = _through_proxy([0.0] * 30 + later, forward, seed=5)
    calm, stats_b, _ = _through_proxy([0.01 * i for i in range(30)] + later, forward, seed=5)
    assert stats_a.line.queue_dropped > stats_b.line.queue_dropped
    assert bursty[30:] == calm[30:]


def test_netem_holds_at_most_max_pending_datagrams_and_counts_the_rest():
    """300 datagrams at once into a 60 s delay with ``max_pending`` 50: 50 wait, 250 are
    counted as overflow, and the queue never held more."""
    peak = 0
    target, client = _udp(), _udp()
    proxy = NetemProxy("127.0.0.1:0", target.getsockname(), DirectionModel.constant(60.0),
                       DirectionModel.constant(0.0), seed=0, max_pending=50)
    try:
        deadline = time.monotonic() + 20.0      # a guard against never, not a timing check
        for chunk in range(6):                  # 50 at a time: more could overflow the kernel's buffer
            for i in range(50 * chunk, 50 * chunk + 50):
                client.sendto(i.to_bytes(4, "big"), proxy.listen_address)
            while proxy.forward_stats.received < 50 * chunk + 50 and time.monotonic() < deadline:
                proxy.step(0.01)
                peak = max(peak, proxy.pending)
        stats = proxy.forward_stats
        assert stats.received == 300 and stats.overflow == 250 and proxy.pending == 50 and peak == 50
        assert "qdrop=250" in stats.line_summary()
    finally:
        proxy.close()
        target.close()
        client.close()


def test_pong_payloads_echo_the_ping_send_time_bit_for_bit():
    """The t1 check relies on the pong echoing the ping's float64 send time exactly."""
    for t1 in (0.0, 1e-300, 0.1 + 0.2, 123456.789012345, -7.5, 2.0**52 + 0.5):
        data = CODEC.encode(ClockPong(1, t1, t1 + 1.0), source_id=1, stream_id=3, seq=1, send_time=t1)
        packet = CODEC.decode(data)
        assert packet.message.ping_send_time == t1 and packet.send_time == t1
