"""Signing keys of the workload identity: ES256 (ECDSA on P-256 with SHA-256), the
algorithm every JOSE library verifies and whose signatures are 64 bytes.

The kid is the key's RFC 7638 thumbprint, so it names the key itself and two keys
can never share one. The private half is stored sealed with AES-256-GCM under a key
derived (HKDF-SHA256) from WORKLOAD_IDENTITY_KEY_SECRET (default: SECRET_KEY), the
kid bound in as associated data: a row copied onto another key's kid does not open.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

ALGORITHM = "ES256"
_NONCE_BYTES = 12
_HKDF_INFO = b"scheduler-platform workload identity keys v1"


class KeyUnavailable(Exception):
    """No token can be signed: the stored key does not open with the configured secret,
    or the process has no signer (the message says which). Worth another attempt once
    an operator has fixed it."""


@dataclass(frozen=True)
class NewKey:
    kid: str
    public_jwk: dict[str, Any]
    sealed_private_key: bytes


def generate() -> NewKey:
    private = ec.generate_private_key(ec.SECP256R1())
    jwk = public_jwk(private.public_key())
    der = private.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return NewKey(kid=jwk["kid"], public_jwk=jwk, sealed_private_key=seal(jwk["kid"], der))


def public_jwk(public: ec.EllipticCurvePublicKey) -> dict[str, Any]:
    numbers = public.public_numbers()
    members = {
        "crv": "P-256",
        "kty": "EC",
        "x": _b64url(numbers.x.to_bytes(32, "big")),
        "y": _b64url(numbers.y.to_bytes(32, "big")),
    }
    # RFC 7638: SHA-256 over the required members, sorted, without whitespace.
    canonical = json.dumps(members, sort_keys=True, separators=(",", ":")).encode()
    kid = _b64url(hashlib.sha256(canonical).digest())
    return members | {"use": "sig", "alg": ALGORITHM, "kid": kid}


def seal(kid: str, private_der: bytes) -> bytes:
    nonce = os.urandom(_NONCE_BYTES)
    return nonce + AESGCM(_sealing_key()).encrypt(nonce, private_der, kid.encode())


def unseal(kid: str, sealed: bytes) -> ec.EllipticCurvePrivateKey:
    try:
        der = AESGCM(_sealing_key()).decrypt(
            sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], kid.encode()
        )
    except InvalidTag:
        raise KeyUnavailable(
            f"identity key {kid} does not open with this WORKLOAD_IDENTITY_KEY_SECRET "
            "(was the secret, or SECRET_KEY it defaults to, changed? rotate to a new key "
            "with `manage.py identity_keys rotate --ahead 0`)"
        ) from None
    private = serialization.load_der_private_key(der, password=None)
    if not isinstance(private, ec.EllipticCurvePrivateKey):
        raise KeyUnavailable(f"identity key {kid} is not an EC key")
    return private


def _sealing_key() -> bytes:
    secret = settings.WORKLOAD_IDENTITY_KEY_SECRET or settings.SECRET_KEY
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_HKDF_INFO)
    return hkdf.derive(secret.encode())


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
