"""Service token format and hashing. Only the digest is ever stored."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

TOKEN_RE = re.compile(r"^sched_([a-z0-9]{8})_([A-Za-z0-9_-]{32,64})$")
INVITATION_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")  # token_urlsafe(32)


@dataclass(frozen=True)
class NewToken:
    raw: str  # shown once to the creator, never stored
    prefix: str
    digest: str


def digest(raw: str) -> str:
    # A fast hash is right here: tokens carry 190+ bits of entropy, so there is
    # nothing to brute-force, and every API request needs one lookup by digest.
    return hashlib.sha256(raw.encode()).hexdigest()


def generate() -> NewToken:
    ident = secrets.token_hex(4)
    raw = f"sched_{ident}_{secrets.token_urlsafe(32)}"
    return NewToken(raw=raw, prefix=f"sched_{ident}", digest=digest(raw))


def generate_invitation() -> tuple[str, str]:
    """(secret, digest) of a new invitation link: the secret goes in the link only,
    the digest (the tokens' rule above) is what the server keeps and looks up by."""
    raw = secrets.token_urlsafe(32)
    return raw, digest(raw)


def looks_like_invitation(raw: str) -> bool:
    return bool(INVITATION_RE.match(raw))


def looks_like_token(raw: str) -> bool:
    return bool(TOKEN_RE.match(raw))
