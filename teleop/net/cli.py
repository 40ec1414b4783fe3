"""Command-line entry points of the network package: the ``netem`` subcommand.

The application CLI calls :func:`register` with its ``add_subparsers()`` object; the
subcommand stores its handler in ``args.func`` (returns an exit code). Standalone:
``python -m teleop.net netem --delay-ms 100``. Only the standard library is imported until
the handler runs.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys

from teleop.cli import runs_on_without_its_reader
from teleop.cli_types import (UsageError, address, burst_length, check_loss_burst, destination, fraction,
                              non_negative_float, positive_float)
from teleop.net.delay import THESIS_JITTER_RATIO, DirectionModel

#: Shortest --stats-interval [s] but 0: 1e-6 printed a line on every turn of the proxy's
#: loop (52,597 lines in 0.5 s), which then spent its time printing instead of forwarding.
MIN_STATS_INTERVAL_S = 0.1


def _stats_interval(text: str) -> float:
    """--stats-interval: 0 (only the final line) or at least :data:`MIN_STATS_INTERVAL_S`."""
    value = non_negative_float(text)
    if 0 < value < MIN_STATS_INTERVAL_S:
        raise argparse.ArgumentTypeError(f"must be 0 (only the final line) or at least {MIN_STATS_INTERVAL_S:g} s, "
                                         f"got {text}")
    return value


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``netem`` subcommand to an application's subparsers; returns its parser."""
    p = subparsers.add_parser(
        "netem",
        help="UDP proxy that delays, jitters, drops, duplicates, reorders and rate-limits traffic both ways",
        description="Listen on --listen, forward datagrams to --target through the forward model "
                    "and the target's replies back to the sender through the backward model. "
                    "Defaults reproduce the thesis' main condition: forward 750 ms with Gaussian "
                    "jitter σ = 2/15 of the delay, backward 750 ms constant.",
    )
    p.add_argument("--listen", type=address, default="127.0.0.1:9000", metavar="HOST:PORT",
                   help="address the operator station sends to (default %(default)s)")
    p.add_argument("--target", type=destination, default="127.0.0.1:9001", metavar="HOST:PORT",
                   help="address of the robot station (default %(default)s)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow non-loopback --listen/--target addresses (exposes the proxy to the network)")
    fwd = p.add_argument_group("forward direction (listen → target: operator commands)")
    fwd.add_argument("--delay-ms", type=non_negative_float, default=750.0,
                     help="constant one-way delay τ_f,D [ms] (default %(default)s)")
    fwd.add_argument("--jitter-ms", type=non_negative_float, default=None,
                     help=f"Gaussian jitter σ [ms] (default {THESIS_JITTER_RATIO:.4f} × delay, thesis Eq. 5.17; "
                          "0 = none)")
    fwd.add_argument("--loss", type=fraction, default=0.0, help="loss probability in [0, 1] (default 0)")
    fwd.add_argument("--loss-burst", type=burst_length, default=None, metavar="PACKETS",
                     help="lose packets in runs of this mean length (Gilbert model, ≥ 1; "
                          "default: each packet lost independently)")
    fwd.add_argument("--dup", type=fraction, default=0.0, help="duplication probability in [0, 1] (default 0)")
    order = fwd.add_mutually_exclusive_group()
    order.add_argument("--reorder", dest="keep_order", action="store_false",
                       help="let packets overtake each other when their jittered delays cross (default)")
    order.add_argument("--keep-order", dest="keep_order", action="store_true",
                       help="deliver in send order (a packet waits for the one before it)")
    fwd.add_argument("--rate-kbps", type=positive_float, default=None,
                     help="bandwidth cap [kbit/s], both directions unless --back-rate-kbps "
                          "(thesis: 3000; default unlimited)")
    back = p.add_argument_group("backward direction (target → listen: robot feedback)")
    back.add_argument("--back-delay-ms", type=non_negative_float, default=None,
                      help="constant one-way delay τ_b [ms] (default: same as --delay-ms, as in the thesis)")
    back.add_argument("--back-jitter-ms", type=non_negative_float, default=0.0,
                      help="Gaussian jitter σ [ms] (default 0: constant, thesis Eq. 5.18)")
    back.add_argument("--back-loss", type=fraction, default=0.0, help="loss probability (default 0)")
    back.add_argument("--back-loss-burst", type=burst_length, default=None, metavar="PACKETS",
                      help="mean run length of backward losses (default: independent)")
    back.add_argument("--back-dup", type=fraction, default=0.0, help="duplication probability (default 0)")
    back.add_argument("--back-keep-order", action="store_true",
                      help="deliver in send order in the backward direction")
    back.add_argument("--back-rate-kbps", type=positive_float, default=None,
                      help="bandwidth cap [kbit/s] (default: --rate-kbps)")
    bounds = p.add_argument_group("bounds and reporting")
    bounds.add_argument("--max-delay-ms", type=non_negative_float, default=10_000.0,
                        help="hard cap on any jittered one-way delay [ms] (default %(default)s)")
    bounds.add_argument("--queue-ms", type=non_negative_float, default=1000.0,
                        help="longest wait behind the bandwidth cap before tail drop [ms] (default %(default)s)")
    bounds.add_argument("--seed", type=int, default=None,
                        help="seed of the impairment decisions, for reproducible runs (default random)")
    bounds.add_argument("--stats-interval", type=_stats_interval, default=5.0,
                        help=f"print statistics every this many seconds (at least {MIN_STATS_INTERVAL_S:g}), "
                             "0 = only at exit (default %(default)s)")
    bounds.add_argument("--duration", type=positive_float, default=None,
                        help="stop after this many seconds (default: run until Ctrl-C / SIGTERM)")
    p.set_defaults(func=runs_on_without_its_reader(run_netem), keep_order=False)
    return p


def models_from_args(args: argparse.Namespace) -> tuple[DirectionModel, DirectionModel]:
    """(forward, backward) impairment models from parsed ``netem`` arguments."""
    def ms(value: float) -> float:
        return value / 1000.0

    def ms_or_none(value: float | None) -> float | None:
        return None if value is None else ms(value)

    def rate(kbps: float | None) -> float | None:
        return None if kbps is None else kbps * 1000.0

    # Checked here so that the message names the options (DirectionModel only knows seconds).
    back_delay = args.delay_ms if args.back_delay_ms is None else args.back_delay_ms
    for option, delay_ms in (("--delay-ms", args.delay_ms), ("--back-delay-ms", back_delay)):
        if delay_ms > args.max_delay_ms:
            raise UsageError(f"{option} {delay_ms:g} exceeds --max-delay-ms {args.max_delay_ms:g}; "
                             "raise --max-delay-ms")
    jitter_ms = THESIS_JITTER_RATIO * args.delay_ms if args.jitter_ms is None else args.jitter_ms
    jitters = (("--jitter-ms", jitter_ms, args.delay_ms), ("--back-jitter-ms", args.back_jitter_ms, back_delay))
    for option, sigma, _ in jitters:
        if sigma > args.max_delay_ms:
            # Most delays would be clipped, to 0 or to the cap: no longer a jitter of sigma
            # (--jitter-ms 1e308 was taken, and the banner printed a 309-digit sigma).
            raise UsageError(f"{option} {sigma:g} exceeds --max-delay-ms {args.max_delay_ms:g}: most delays would be "
                             "clipped to 0 or to the cap; give a smaller jitter (or raise --max-delay-ms)")
    check_loss_burst(args.loss, args.loss_burst)
    check_loss_burst(args.back_loss, args.back_loss_burst, "--back-loss", "--back-loss-burst")
    # Warned of after the checks above: no warning before one of their error lines.
    for option, sigma, delay_ms in jitters:
        if sigma > delay_ms:
            # Delays are clipped at 0: the link is then no longer the Gaussian the options describe.
            print(f"teleop netem: warning: {option} {sigma:g} is more than the delay {delay_ms:g} ms: "
                  f"{100 * _share_below_zero(delay_ms, sigma):.0f} % of the packets would have a negative delay "
                  "and are sent at once", file=sys.stderr)
    common = dict(max_delay=ms(args.max_delay_ms), queue_limit=ms(args.queue_ms))
    forward = DirectionModel(delay=ms(args.delay_ms), jitter=ms_or_none(args.jitter_ms), loss=args.loss,
                             loss_burst=args.loss_burst,
                             duplicate=args.dup, keep_order=args.keep_order,
                             rate_bps=rate(args.rate_kbps), **common)
    back_rate = args.rate_kbps if args.back_rate_kbps is None else args.back_rate_kbps
    backward = DirectionModel(delay=ms(back_delay), jitter=ms_or_none(args.back_jitter_ms), loss=args.back_loss,
                              loss_burst=args.back_loss_burst,
                              duplicate=args.back_dup, keep_order=args.back_keep_order,
                              rate_bps=rate(back_rate), **common)
    return forward, backward


def _check_addresses(args: argparse.Namespace) -> None:
    """Resolve --listen and --target, each on its own so that a failure names its option (a
    target that does not resolve was reported as a --listen error), and refuse either off
    loopback without --allow-remote, before anything is bound."""
    from teleop.net.udp import NonLoopbackRefused, is_loopback, parse_address, resolve

    for option, value, action in (("--listen", args.listen, "listen on"), ("--target", args.target, "forward to")):
        try:
            host = resolve(parse_address(value))[1][0]
        except OSError as exc:
            raise OSError(f"{option} {value}: {exc.strerror or exc}") from None
        if not args.allow_remote and not is_loopback(host):
            raise NonLoopbackRefused(f"{option} {value}: refusing to {action} non-loopback address {host}; "
                                     "give --allow-remote to expose the proxy to the network")


def _share_below_zero(mean_ms: float, sigma_ms: float) -> float:
    """P(delay < 0) for a delay ~ N(mean, sigma²) [ms]: the share of packets clipped to 0."""
    return 0.5 * (1.0 + math.erf(-mean_ms / (sigma_ms * math.sqrt(2.0))))


def run_netem(args: argparse.Namespace) -> int:
    """Run the proxy until SIGINT/SIGTERM or ``--duration``; returns the exit code."""
    from teleop.net.netem import NetemProxy  # here, not at the top: keeps `teleop --help` fast

    # Errors are teleop's (teleop.cli.run_command): 2 for options that cannot go together, 1
    # for what the command line cannot help (an address in use, a host that does not
    # resolve, a non-loopback address without --allow-remote).
    forward, backward = models_from_args(args)
    _check_addresses(args)
    from teleop.net.udp import reaches_own_socket

    if reaches_own_socket(args.target, args.listen):
        raise UsageError(f"--target {args.target} is the proxy's own --listen {args.listen}: it would forward "
                         "to itself; --target is the robot station's address")
    try:
        proxy = NetemProxy(args.listen, args.target, forward, backward, seed=args.seed,
                           allow_remote=args.allow_remote)
    except OSError as exc:   # binding --listen (--target resolved above): in use, not of this machine
        raise OSError(f"--listen {args.listen}: {exc.strerror or exc}") from None
    with proxy:
        # Stopping the proxy is its clean end (statistics, exit code 0) from the moment a
        # script can know it listens: the handlers go in before the line that says so.
        previous = {sig: signal.signal(sig, lambda *_: proxy.stop()) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            print(f"netem: {proxy.listen_address[0]}:{proxy.listen_address[1]} → "
                  f"{proxy.target[0]}:{proxy.target[1]} | forward {_describe(forward)} | "
                  f"backward {_describe(backward)}", flush=True)
            proxy.run(duration=args.duration, stats_interval=args.stats_interval or None)
            if not args.stats_interval:   # the one line: final, as run()'s last line is
                print(proxy.final_line(), flush=True)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return 0


def _describe(model: DirectionModel) -> str:
    text = f"{1e3 * model.delay:.0f}±{1e3 * model.sigma:.0f}ms"
    if model.loss:
        text += f" loss={model.loss:g}"
        if model.loss_burst is not None:
            text += f" in runs of {model.loss_burst:g}"
    if model.duplicate:
        text += f" dup={model.duplicate:g}"
    if model.rate_bps:
        text += f" rate={model.rate_bps / 1e3:g}kbps"
    return text + (" in-order" if model.keep_order else "")


def main(argv: list[str] | None = None) -> int:
    """Standalone entry point: ``python -m teleop.net netem ...``."""
    parser = argparse.ArgumentParser(prog="python -m teleop.net")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    from teleop.cli import run_command   # the exit codes and error lines of every command

    return run_command(args)
