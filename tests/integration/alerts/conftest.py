"""Fixtures of the alert tests: a real SMTP server (aiosmtpd) on loopback that
keeps every message it receives."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from tests.support.net import free_port


@dataclass
class Mailbox:
    """What the SMTP server accepted: (envelope recipients, parsed message) per mail."""

    port: int
    received: list[tuple[list[str], Message]] = field(default_factory=list)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        self.received.append((list(envelope.rcpt_tos), message_from_bytes(content)))
        return "250 OK"


@pytest.fixture
def smtp_server(settings: Any) -> Iterator[Mailbox]:
    """A real SMTP server on 127.0.0.1, and Django's SMTP backend pointed at it."""
    mailbox = Mailbox(port=free_port())
    controller = Controller(mailbox, hostname="127.0.0.1", port=mailbox.port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = mailbox.port
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_HOST_USER = ""
    settings.EMAIL_HOST_PASSWORD = ""
    try:
        yield mailbox
    finally:
        controller.stop()
