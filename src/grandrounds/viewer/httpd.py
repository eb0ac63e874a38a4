"""The viewer's HTTP server: stdlib ``ThreadingHTTPServer`` with a bounded number of handler
threads and one watchdog that cuts off requests not received in time."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from grandrounds.viewer.state import ViewerContext


class ViewerServer(ThreadingHTTPServer):
    """A threading HTTP server with a bounded number of handler threads.

    The accept loop waits up to ``slot_wait`` seconds for a free slot; a connection that finds
    none is answered 503 and closed, so a flood of connections never grows the thread count.
    ``context`` (set once the port is bound) is what its handlers check and answer from.
    """

    daemon_threads = True
    request_queue_size = 64

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        max_threads: int = 16,
        slot_wait: float = 2.0,
    ) -> None:
        self.slots = threading.BoundedSemaphore(max_threads)
        self.slot_wait = slot_wait
        self.context: ViewerContext | None = None
        self.deadlines: dict[Any, float] = {}  # handler -> monotonic time its request must be in by
        self.deadlines_lock = threading.Lock()
        self.closed = threading.Event()
        super().__init__(address, handler)
        threading.Thread(target=self._watchdog, daemon=True).start()

    def watch(self, handler: Any, seconds: float) -> None:
        with self.deadlines_lock:
            self.deadlines[handler] = time.monotonic() + seconds

    def unwatch(self, handler: Any) -> None:
        with self.deadlines_lock:
            self.deadlines.pop(handler, None)

    def _watchdog(self) -> None:
        """One thread for every request's deadline: cut off those not received in time."""
        while not self.closed.wait(0.2):
            now = time.monotonic()
            with self.deadlines_lock:
                late = [h for h, t in self.deadlines.items() if t < now]
                for h in late:
                    del self.deadlines[h]
            for h in late:
                h.cut_off()

    def server_close(self) -> None:
        self.closed.set()
        super().server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(timeout=self.slot_wait):
            self._busy(request)
            return
        try:
            threading.Thread(
                target=self._handle, args=(request, client_address), daemon=True
            ).start()
        except BaseException:
            self.slots.release()
            self.shutdown_request(request)
            raise

    def _handle(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def _busy(self, request: socket.socket) -> None:
        body = b"the viewer is busy; retry in a moment\n"
        head = f"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
        try:
            request.settimeout(0.2)
            request.sendall(head.encode("ascii") + body)
            request.recv(
                65536
            )  # read what the client sent, so closing does not reset the connection before it reads the 503
        except OSError:
            pass
        self.shutdown_request(request)


class ViewerServer6(ViewerServer):
    address_family = socket.AF_INET6
