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
    _forget_unhandled_keyboard_interrupt()


def _forget_unhandled_keyboard_interrupt() -> None:
    """Tell CPython that the KeyboardInterrupt was handled after all.

    CPython (3.11 ``_Py_UnhandledKeyboardInterrupt``, 3.12+ ``_PyRuntime.signals``) marks a
    KeyboardInterrupt that leaves the code of a *string* ``exec``/``eval`` (``PyRun_String``:
    ``collections.namedtuple`` and ``dataclasses`` build their methods that way, e.g. numpy.random
    imported mid-command) as unhandled, even when we catch it further up. Under ``python -m
    teleop`` ``Py_RunMain`` then ends the process by SIGINT after our ``sys.exit``: exit code -2
    instead of 130 after "interrupted" (or 0 for a station that stopped cleanly), with no
    traceback. Every string exec clears the mark when it starts: an empty one forgets it. (A
    KeyboardInterrupt that really reaches the top is marked again by ``pymain_run_module``.)"""
    exec("pass", {})


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
