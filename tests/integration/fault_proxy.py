"""A fault-injecting proxy of the tests' own, in front of the real kube-apiserver, on loopback.

Clients speak plain HTTP to it (their kubeconfig names it, with their own token); it forwards
each request over TLS to the API server and, at set rates drawn from a seeded generator, answers
instead with 409, 429 (Retry-After: 1), 500 or 503, drops the connection before or after
forwarding (the last is a write that happened but whose reply was lost), ends watches early,
or answers a watch with the API server's own "too old resource version" ERROR event (410), which
makes an informer relist. `budget` bounds the faults, so every client converges once it is
spent; `counts` says what was injected.
"""

from __future__ import annotations

import http.client
import json
import random
import ssl
import threading
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "te", "upgrade"}
FAULTS = ("409", "429", "500", "503", "drop", "drop-after", "cut-watch", "410-watch")


class FaultProxy:
    def __init__(
        self,
        upstream: str,
        rates: dict[str, float],
        seed: int,
        budget: int,
        first_watches: tuple[str, ...] = (),
    ) -> None:
        """`first_watches`: the faults of the first watch requests, in order (then `rates`),
        so a short test sees each watch fault however few watches its clients open."""
        unknown = set(rates) - set(FAULTS)
        assert not unknown, f"unknown faults {unknown}"
        self.upstream = urllib.parse.urlsplit(upstream)
        self.rates = rates
        self.budget = budget
        self._first_watches = list(first_watches)
        self.counts: Counter[str] = Counter()
        self.requests = 0
        # one stream for watches and one for the rest, so the few watches see their own draws
        # in order however the many other requests interleave with them
        self._rng = {True: random.Random(seed), False: random.Random(seed + 1)}
        self._lock = threading.Lock()
        self._ctx = ssl.create_default_context()
        self._ctx.check_hostname = False
        self._ctx.verify_mode = ssl.CERT_NONE
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def pick(self, method: str, watch: bool) -> str | None:
        """The fault for one request, or None to forward it untouched."""
        allowed = {
            "409": method in ("POST", "PUT", "PATCH"),
            "drop-after": method in ("POST", "PUT", "PATCH", "DELETE"),
            "cut-watch": watch,
            "410-watch": watch,
        }
        with self._lock:
            self.requests += 1
            if sum(self.counts.values()) >= self.budget:
                return None
            if watch and self._first_watches:
                fault = self._first_watches.pop(0)
                self.counts[fault] += 1
                return fault
            roll = self._rng[watch].random()
            for fault in FAULTS:
                if not allowed.get(fault, not watch):
                    continue
                rate = self.rates.get(fault, 0.0)
                if roll < rate:
                    self.counts[fault] += 1
                    return fault
                roll -= rate
            return None

    def connect(self) -> http.client.HTTPSConnection:
        host, port = self.upstream.hostname or "127.0.0.1", self.upstream.port
        return http.client.HTTPSConnection(host, port, timeout=120, context=self._ctx)


def _status(code: int, reason: str) -> bytes:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    return json.dumps({**body, "reason": reason, "message": f"injected {code}"}).encode()


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _reply(self, code: int, body: bytes, extra: dict[str, str] | None = None) -> None:
            self.send_response(code)
            for k, v in {"Content-Type": "application/json", **(extra or {})}.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            watch = "watch=1" in self.path or "watch=true" in self.path
            fault = proxy.pick(self.command, watch)
            if fault in ("409", "429", "500", "503"):
                reasons = {"409": "Conflict", "429": "TooManyRequests", "500": "InternalError"}
                extra = {"Retry-After": "1"} if fault == "429" else None
                self._reply(
                    int(fault), _status(int(fault), reasons.get(fault, "Unavailable")), extra
                )
                return
            if fault == "drop":
                self.close_connection = True
                return
            if fault == "410-watch":
                event = b'{"type":"ERROR","object":' + _status(410, "Expired") + b"}\n"
                self._reply(200, event)
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            conn = proxy.connect()
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                reply = conn.getresponse()
                if fault == "drop-after":
                    reply.read()
                    self.close_connection = True
                    return
                self.send_response(reply.status)
                for k, v in reply.getheaders():
                    if k.lower() not in HOP:
                        self.send_header(k, v)
                if not watch:
                    data = reply.read()
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for lines, line in enumerate(reply, 1):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                    if fault == "cut-watch" and lines >= 3:
                        self.close_connection = True
                        return
                self.wfile.write(b"0\r\n\r\n")
            except (OSError, http.client.HTTPException):
                self.close_connection = True
            finally:
                conn.close()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    return Handler
