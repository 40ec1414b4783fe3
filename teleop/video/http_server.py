"""The web viewer's HTTP server: the stdlib's threading server with bounded connections.

:class:`ViewerHTTPServer` admits at most :data:`MAX_CONNECTIONS` connections at once, gives
each :data:`REQUEST_DEADLINE_S` to deliver its whole request, lets a newcomer evict the
connection waiting longest for its request when every slot is taken, and stays silent
when a client goes away. The routes are :mod:`teleop.video.web`'s handler; this module
knows nothing of them.
"""

from __future__ import annotations

import http.server
import select
import socket
import sys
import threading
from typing import Any

from teleop.video.clock import monotonic_s

#: Connections served at once (see ViewerHTTPServer below): a few open tabs use a handful each
#: (a stream per camera and short polls), the backlog's reconnect burst 64.
MAX_CONNECTIONS = 128
_TOO_MANY_CONNECTIONS = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                         b"Retry-After: 1\r\n\r\ntoo many connections to the viewer")
#: Time a connection has to deliver a whole request (request line and headers) [s], counted
#: from when the viewer starts waiting for it (the accept; after a keep-alive response, the
#: end of that response). A browser sends its request (about a kilobyte) in one segment right
#: after connecting: on loopback or a LAN it arrives within milliseconds, and 10 s is more
#: than even three lost segments cost (TCP retransmits after 1, 2 and 4 s). The socket
#: timeout (``client_timeout_s``) alone restarts at every byte, so a client trickling a byte
#: every few seconds (slowloris) held its connection, thread and descriptor for ever.
REQUEST_DEADLINE_S = 10.0
_REQUEST_TIMEOUT = (b"HTTP/1.0 408 Request Timeout\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
                    b"request not received in time")


def _send_without_waiting(sock: socket.socket, data: bytes) -> None:
    """Send what fits in ``sock``'s buffer now, or nothing; never wait (best effort, for the
    accept thread). MSG_DONTWAIT alone is not enough: on a socket with a timeout (a handler's,
    ``client_timeout_s``) CPython first waits up to that timeout for the socket to be
    writable, so the writability is checked here without waiting."""
    try:
        poller = select.poll()  # not select.select: it fails on descriptors >= 1024
        poller.register(sock, select.POLLOUT)
        if poller.poll(0):
            sock.send(data, socket.MSG_DONTWAIT)
    except OSError:
        pass


class _Connection:
    """Bookkeeping of one admitted connection (see ViewerHTTPServer below), under its lock.

    ``waiting_since_s`` and ``deadline_s`` (monotonic seconds) describe the request being
    waited for; ``finished`` is set once that request has been read whole (or an answer
    started), ``evicted`` once the viewer closed the connection from outside its handler
    thread, and ``closing`` once the handler thread closes the socket itself (the socket
    must then no longer be touched: its descriptor number may be reused at once).
    """

    __slots__ = ("sock", "waiting_since_s", "deadline_s", "finished", "evicted", "closing")

    def __init__(self, sock: socket.socket, now_s: float) -> None:
        self.sock = sock
        self.waiting_since_s = now_s
        self.deadline_s = now_s + REQUEST_DEADLINE_S
        self.finished = False
        self.evicted = False
        self.closing = False

    def waiting(self) -> bool:
        """True while the request has not been read whole and the connection is not closed."""
        return not (self.finished or self.evicted or self.closing)


class ViewerHTTPServer(http.server.ThreadingHTTPServer):
    """The viewer's server: a deep listen backlog. After a stall every open tab's polls and
    streams reconnect at once; the stdlib's 5 would drop the rest (retried a second or
    more later by the client's SYN backoff).

    At most :data:`MAX_CONNECTIONS` connections hold a slot at once. The stdlib's server
    takes every connection it is offered, each with a thread and a descriptor, so any
    program on the machine (the port is open to every local user) could open connections
    until the station's process ran out of descriptors: it then could open no file, and the
    accept loop spun on EMFILE.

    When every slot is taken, a new connection evicts the connection that has waited
    longest for its request (not read whole yet, or idle between keep-alive requests): one
    local program opening connections and never finishing their requests would otherwise
    lock every browser out (on loopback every client is 127.0.0.1, so a cap per address
    cannot tell them apart). A browser's request is read within milliseconds of its
    connection, so a flood must bring a slot's worth of newer connections in that time to
    evict it. Only when every slot serves a request read whole (an MJPEG stream, a response
    being written) does the newcomer get a 503 and get closed. A connection that has not
    delivered its whole request within :data:`REQUEST_DEADLINE_S` is closed the same way
    (a slowloris client, whose trickled bytes restart the socket timeout each time).

    Closing a connection from outside its handler thread (the accept thread does it, in
    :meth:`process_request` and :meth:`service_actions`, every poll interval): a 408 sent
    without blocking (best effort: a full buffer or a reset drops it), then
    ``shutdown(SHUT_RDWR)``, which wakes the handler's blocked read with an end of file; the
    handler then answers nothing more (see ``request_received``) and ends, and the count
    drops in :meth:`_connection_ended` as for any other connection. An evicted connection
    holds no slot while its thread ends (at once: its read returns), nor does one whose
    handler is closing its socket (a client that saw the end of its answer finds the slot
    free), but each still holds a thread and a descriptor, so no connection is admitted
    while twice :data:`MAX_CONNECTIONS` threads run: threads and descriptors stay bounded
    whatever the clients do.
    """

    request_queue_size = 64
    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._connections = 0   # handler threads running (admitted, not ended), evicted ones included
        # Of which released: evicted, or closing their socket at their handler's end. They
        # hold no slot: their threads end at once, and a client that saw its connection
        # close finds the slot free.
        self._released = 0
        self._records: dict[socket.socket, _Connection] = {}
        self._connections_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        now_s = monotonic_s()
        with self._connections_lock:
            admitted = self._connections < 2 * MAX_CONNECTIONS and (
                self._connections - self._released < MAX_CONNECTIONS or self._evict_oldest_waiting())
            if admitted:
                self._connections += 1
                self._records[request] = _Connection(request, now_s)
        if not admitted:
            # Best effort and never blocking: the accept loop must not wait on this client.
            _send_without_waiting(request, _TOO_MANY_CONNECTIONS)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:   # no thread started (the caller closes the socket): not counted
            self._connection_ended(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connection_ended(request)

    def shutdown_request(self, request: Any) -> None:
        # Marked under the lock before the socket is closed: an eviction must never shut
        # down a closed socket's descriptor number, which another connection may already
        # reuse; and the slot is released before the client can see the close.
        with self._connections_lock:
            record = self._records.get(request)
            if record is not None and not record.closing:
                record.closing = True
                if not record.evicted:
                    self._released += 1
        super().shutdown_request(request)

    def _connection_ended(self, request: Any) -> None:
        with self._connections_lock:
            self._connections -= 1
            record = self._records.pop(request, None)
            if record is not None and (record.evicted or record.closing):
                self._released -= 1

    def service_actions(self) -> None:
        """Close the connections past their request deadline (run by serve_forever in the
        accept thread after each accept and each poll interval, 0.1 s): a watchdog apart from
        the reads, which the stdlib makes many at a time (a readline is a recv per segment,
        each restarting the socket timeout), so trickled bytes cannot defer it."""
        now_s = monotonic_s()
        with self._connections_lock:
            for record in self._records.values():
                if record.waiting() and now_s >= record.deadline_s:
                    self._evict(record)

    def _evict_oldest_waiting(self) -> bool:
        """Evict the connection waiting longest for its request; True if there was one.
        Caller holds the lock."""
        oldest: _Connection | None = None
        for record in self._records.values():
            if record.waiting() and (oldest is None or record.waiting_since_s < oldest.waiting_since_s):
                oldest = record
        if oldest is None:
            return False
        self._evict(oldest)
        return True

    def _evict(self, record: _Connection) -> None:
        """Close a waiting connection from outside its handler thread: a 408 (best effort,
        never blocking), then shutdown, which wakes its handler. Caller holds the lock."""
        record.evicted = True
        self._released += 1
        _send_without_waiting(record.sock, _REQUEST_TIMEOUT)
        try:
            record.sock.shutdown(socket.SHUT_RDWR)
        except OSError:   # already reset by the client
            pass

    def await_request(self, request: Any) -> bool:
        """A handler starts waiting for a request: the deadline restarts if the previous one
        was finished (keep-alive). False if the connection was evicted."""
        now_s = monotonic_s()
        with self._connections_lock:
            record = self._records.get(request)
            if record is None:
                return True
            if record.finished and not record.evicted:
                record.finished = False
                record.waiting_since_s = now_s
                record.deadline_s = now_s + REQUEST_DEADLINE_S
            return not record.evicted

    def request_received(self, request: Any) -> bool:
        """A handler has read a whole request, or starts an answer: the connection is no
        longer evicted nor timed out. False if it was evicted before: the 408 has been sent
        and the socket shut down, so the handler must answer nothing."""
        with self._connections_lock:
            record = self._records.get(request)
            if record is None:
                return True
            if not record.evicted:
                record.finished = True
            return not record.evicted

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay silent when the client went away: the stdlib's handler reads the request and
        writes its own error answers (400, 414, 431, ...) outside the handler's own guards,
        so a client that closed or reset the connection meanwhile (a tab closed while
        loading, an oversized URL refused and the client gone, a port scanner) printed a
        ConnectionResetError/BrokenPipeError traceback on the operator's console, one per
        connection: any local program could flood it. Other exceptions are viewer bugs and
        keep the stdlib's traceback."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)

