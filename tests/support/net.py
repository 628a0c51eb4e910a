"""Loopback ports for the servers tests start (the chaos run's own Redis and
RabbitMQ, `make run`, gunicorn and runserver, the SMTP server): standard library
only, so that any test module may import it without loading Django's apps."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago (the OS's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
