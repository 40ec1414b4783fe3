"""A stop asked for by a signal, kept until the command has acted on it.

``teleop.cli.sigterm_as_interrupt`` turns Ctrl-C, SIGTERM and SIGHUP into a KeyboardInterrupt
raised wherever the main thread happens to be. Raised inside the initialisation of a compiled
module being imported for the first time (numpy.random's ``_generator``, imported mid-command,
registers itself with ``collections.abc`` inside a ``try`` that catches everything), that
exception is swallowed and the stop was lost: ``teleop jog --make-test-video`` went on
rendering to the end and exited 0. The handler therefore also records the request here, and
the long loops (the stations' loop, progress bars, rendering, streaming, recording, jogging)
call :func:`raise_if_stop_lost` once per step, which raises the KeyboardInterrupt again.

Code that catches the KeyboardInterrupt to finish its work (close a recording, print its
statistics) calls :func:`stop_handled`, so its cleanup is not interrupted a second time.
"""

from __future__ import annotations

_pending = False


def request_stop() -> None:
    """Record that a stop signal arrived (called by the signal handler)."""
    global _pending
    _pending = True


def stop_handled() -> None:
    """The KeyboardInterrupt of the stop has been caught: forget the request."""
    global _pending
    _pending = False


def stop_pending() -> bool:
    """Whether a stop signal arrived that no one has caught the KeyboardInterrupt of yet."""
    return _pending


def raise_if_stop_lost() -> None:
    """Raise KeyboardInterrupt if a stop signal arrived and its KeyboardInterrupt never got
    here (swallowed on the way); once, then the request is forgotten."""
    global _pending
    if _pending:
        _pending = False
        raise KeyboardInterrupt
