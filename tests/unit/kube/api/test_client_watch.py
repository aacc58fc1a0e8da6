"""A watch whose stream ends in the middle of an event (the connection shut under it, a
multi-byte character cut in two) is a dropped watch (ApiError, which the informer retries),
never a decoding error escaping the informer's thread."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpucarve.kube.api.client import ApiError, Client

GOOD = json.dumps({"type": "ADDED", "object": {"metadata": {"name": "café-ü"}}}).encode()


class _Cut(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        whole = json.dumps({"type": "ADDED", "object": {"metadata": {"name": "naïve"}}},
                           ensure_ascii=False).encode()  # fmt: skip
        self.wfile.write(GOOD + b"\n" + whole[: whole.index("ï".encode()) + 1])  # cut in "ï"
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Cut)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_an_event_cut_short_ends_the_watch_as_a_drop(server: str) -> None:
    client = Client(server, ssl.create_default_context(), {})
    events = client.watch("/api/v1/pods", "1", timeout_s=5)
    assert next(events)["object"]["metadata"]["name"] == "café-ü"
    with pytest.raises(ApiError, match="cut short") as err:
        next(events)
    assert err.value.status == 0
