"""Request bodies sent with `Transfer-Encoding: chunked` (no Content-Length).

Django reads exactly CONTENT_LENGTH bytes of a request body, so a chunked body
arrived as empty and the request failed as if nothing had been sent. Both web
servers the platform runs get the body to Django with a length:

* gunicorn (production) de-chunks the body itself and says so with
  `wsgi.input_terminated`; ChunkedBodyMiddleware (the WSGI application in
  config/wsgi.py) reads it, bounded, and sets CONTENT_LENGTH.
* runserver (`make run`) does not understand chunking at all;
  ChunkedRequestHandler decodes the framing from the socket before the request
  reaches the WSGI application (used by config/management/commands/runserver.py).

At most DATA_UPLOAD_MAX_MEMORY_SIZE + 1 bytes are read: a longer body is cut
there, so the size guards answer 413 (API) or 400 without buffering the rest.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import IO, Any

from django.conf import settings
from django.core.servers.basehttp import WSGIRequestHandler, WSGIServer

MAX_CHUNK_LINE = 1024


def _limit() -> int:
    return int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE or settings.API_MAX_BODY_BYTES) + 1


def _is_chunked(transfer_encoding: str | None) -> bool:
    return "chunked" in (transfer_encoding or "").lower()


def read_chunked(stream: IO[bytes], limit: int) -> tuple[bytes, bool]:
    """Decode a chunked body from `stream`: (up to `limit` bytes, whether it ended).

    ValueError on broken framing.
    """
    body = bytearray()
    while True:
        line = stream.readline(MAX_CHUNK_LINE)
        if not line.endswith(b"\n"):
            raise ValueError("chunk size line is missing or too long")
        size_text = line.split(b";", 1)[0].strip()
        if not size_text or len(size_text) > 16:
            raise ValueError("bad chunk size")
        size = int(size_text, 16)  # ValueError when not hex
        if size == 0:
            # Trailer fields, up to the blank line that ends the message.
            while True:
                trailer = stream.readline(MAX_CHUNK_LINE)
                if trailer in (b"\r\n", b"\n", b""):
                    return bytes(body), True
        if len(body) + size > limit:
            body += stream.read(limit - len(body))
            return bytes(body), False
        chunk = stream.read(size)
        if len(chunk) != size:
            raise ValueError("chunked body ended early")
        body += chunk
        if stream.readline(MAX_CHUNK_LINE).strip():
            raise ValueError("chunk data is longer than its size")


class ChunkedBodyMiddleware:
    """WSGI wrapper: a body the server de-chunked (wsgi.input_terminated) gets a length."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if (
            _is_chunked(environ.get("HTTP_TRANSFER_ENCODING"))
            and not environ.get("CONTENT_LENGTH")
            and environ.get("wsgi.input_terminated")
        ):
            body = environ["wsgi.input"].read(_limit())
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
        return self.app(environ, start_response)


class ChunkedRequestHandler(WSGIRequestHandler):
    """runserver's request handler, decoding chunked bodies from the connection."""

    def handle_one_request(self) -> None:
        connection = self.rfile
        try:
            super().handle_one_request()
        finally:
            self.rfile = connection  # the next request on a kept-alive connection

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if not _is_chunked(self.headers.get("Transfer-Encoding")) or self.headers.get(
            "Content-Length"
        ):
            return True
        try:
            body, complete = read_chunked(self.rfile, _limit())
        except ValueError as exc:
            self.close_connection = True
            self.send_error(400, f"malformed chunked body: {exc}")
            return False
        if not complete:
            self.close_connection = True  # the rest of the body is still on the socket
        del self.headers["Transfer-Encoding"]
        self.headers["Content-Length"] = str(len(body))
        self.rfile = io.BytesIO(body)
        return True


class ChunkedWSGIServer(WSGIServer):
    """runserver's server with ChunkedRequestHandler (basehttp.run names no handler hook)."""

    def __init__(self, server_address: Any, handler: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(server_address, ChunkedRequestHandler, *args, **kwargs)
