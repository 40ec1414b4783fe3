"""``teleop lockstep``: serve the simulation to an external controller in lock step, or run
the demo controller against such a server (protocol: docs/lockstep_protocol.md)."""

from __future__ import annotations

import argparse
import os
import sys

from teleop.cli import runs_on_without_its_reader
from teleop.cli_types import UsageError, port, positive_int
from teleop.json_safe import dumps


def _joint_names(text: str) -> list[str]:
    """``--joints``: a comma-separated list of at least one group or joint name ("," and ""
    name none: the server refused them after loading the simulation, exit code 1, in words
    that named no option); whether each names a group or joint of the robot is checked once
    the robot is loaded."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"give at least one joint group or joint name, e.g. left_arm,right_arm or "
                                         f"r_elbow; got {text!r}")
    return names


def register(sub: argparse._SubParsersAction) -> None:
    from teleop.sim.lockstep_client import MAX_COMMAND_TIMEOUT_S, add_demo_arguments, command_timeout

    p = sub.add_parser("lockstep", help="lock-step coupling of the simulation with an external controller",
                       description="The simulation steps in strict alternation with a controller in another "
                                   "process (any language) over TCP: each 1 ms step waits for that step's "
                                   "command; sequence numbers guard against lost or reused steps. "
                                   "Protocol: docs/lockstep_protocol.md.")
    lsub = p.add_subparsers(dest="lockstep_command", metavar="ACTION")

    serve = lsub.add_parser("serve", help="run the simulation as a lock-step server",
                            description="Listen for controllers one after the other; each session starts from "
                                        "the home posture. Prints one line per session (steps, real-time factor).")
    serve.add_argument("--host", default="127.0.0.1",
                       help="listen address (default: 127.0.0.1, loopback only; another needs --allow-remote)")
    serve.add_argument("--allow-remote", action="store_true",
                       help="allow a non-loopback --host: exposes the simulation to the network (anyone who reaches "
                            "the port drives it, unauthenticated)")
    serve.add_argument("--port", type=port, default=47500, help="TCP port (default: 47500; 0 picks a free one)")
    serve.add_argument("--joints", type=_joint_names, default="left_arm,right_arm",
                       help="comma-separated groups or joint names the controller commands "
                            "(default: left_arm,right_arm); the rest stay position-servoed")
    serve.add_argument("--max-steps", type=positive_int, default=None, help="end each session after this many steps")
    serve.add_argument("--sessions", type=positive_int, default=None,
                       help="exit after this many sessions (default: never)")
    serve.add_argument("--timeout", type=command_timeout, default=10.0,
                       help=f"seconds to wait for each command, at most {MAX_COMMAND_TIMEOUT_S:g} (default: 10)")
    serve.add_argument("--floating-base", action="store_true",
                       help="let the robot stand on its feet (default: base bolted to the world)")
    serve.add_argument("--no-clip", action="store_true", help="do not clip torques to the effort limits")
    serve.add_argument("--robot", default="icub", help="robot description (default: icub)")
    serve.add_argument("--json", action="store_true",
                       help="print each session report as one JSON line (the listening banner goes to stderr)")
    serve.set_defaults(func=runs_on_without_its_reader(_serve))

    demo = lsub.add_parser("demo-client", help="run the demo joint-impedance controller against a server",
                           description="A controller in this process: joint impedance (gravity compensation + "
                                       "spring-damper) holding the home posture with a slow shoulder swing. "
                                       "Prints a JSON summary (sequence counters, server RTF, tracking error).")
    add_demo_arguments(demo)
    demo.set_defaults(func=_demo)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _check_host(args: argparse.Namespace) -> None:
    """Refuse, before the simulation loads, a --host that does not resolve, and one off
    loopback without --allow-remote: the protocol has no authentication, and whoever reaches
    the port drives the simulation."""
    import socket

    from teleop.net.udp import NonLoopbackRefused, is_loopback

    try:
        # (A str for the IPv4 / IPv6 families a host name resolves to.)
        address = str(socket.getaddrinfo(args.host, args.port, type=socket.SOCK_STREAM)[0][4][0])
    except OSError as exc:
        raise OSError(f"--host {args.host}: {exc.strerror or exc}") from None
    if not args.allow_remote and not is_loopback(address):
        raise NonLoopbackRefused(f"--host {args.host}: refusing to listen on non-loopback address {address}; "
                                 "give --allow-remote to expose the simulation to the network")


def _serve(args: argparse.Namespace) -> int:
    _check_host(args)
    from teleop.data_args import robot_model_of
    from teleop.sim.lockstep import LockstepServer
    from teleop.sim.simulator import Simulation

    robot = robot_model_of(args)
    names = args.joints
    try:
        joints = [int(i) for name in names for i in robot.group_indices(name)]
    except KeyError as exc:   # a typo in --joints: one line, not a traceback
        groups = ", ".join(sorted(robot.description.groups))
        raise UsageError(f"--joints: {exc.args[0]} (groups: {groups})") from None
    twice = sorted({robot.joint_names[j] for j in joints if joints.count(j) > 1})
    if twice:   # the server refused "a joint is listed twice", naming neither it nor the option
        raise UsageError(f"--joints {','.join(names)}: {', '.join(twice)} named twice (a group and one of its "
                         "joints?)")
    sim = Simulation(robot, visual=False, fixed_base=not args.floating_base)
    try:
        try:
            server = LockstepServer(sim, joints, host=args.host, port=args.port, max_steps=args.max_steps,
                                    command_timeout=args.timeout, clip_torques=not args.no_clip)
        except OSError as exc:   # the port in use (another server?) or the host not of this machine
            # socket.create_server's strerror adds "(while attempting to bind on address (...))".
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise OSError(f"--port {args.port} on {args.host}: {reason}") from None
        with server:
            host, port = server.address
            # With --json, stdout carries only the JSON session reports: the banner goes to stderr.
            print(f"lock-step server on {host}:{port}: {len(joints)} joints ({', '.join(names)}), "
                  f"dt {sim.dt * 1000:g} ms; waiting for a controller", flush=True,
                  file=sys.stderr if args.json else sys.stdout)
            log = (lambda _msg: print(dumps(server.reports[-1].as_dict()), flush=True)) if args.json \
                else (lambda msg: print(msg, flush=True))
            server.serve_forever(max_sessions=args.sessions, log=log)
    finally:
        sim.close()
    return 0


def _demo(args: argparse.Namespace) -> int:
    from teleop.sim.lockstep_client import run_demo

    return run_demo(args)
