"""The principal a signed-in request carries to Dagster's webserver: a header the gate signs, which
Custody's run coordinator trusts, and nothing a client sends can stand for.

Served in the service's own process, the webserver trusts this process's key, made when this module
is first imported and never kept anywhere else. A webserver served on its own (`dg dev`,
`dagster-webserver`) behind `custody serve --dagster-url` trusts the public key in its
CUSTODY_UI_VERIFY_KEY, whose private half only the service holds (CUSTODY_UI_SIGNING_KEY): the
programs that webserver starts inherit its environment, run workers running owners' code among
them, and a public key signs nothing.

A header is good for one request: it is signed with the digest of that request's method and body
(the gate passes on the body it read), and with a nonce the coordinator takes once; one from another
process's key is good for HEADER_SECONDS after it was signed. It names the session by its key, which
no cookie is made of, so that the coordinator can tell whether the session is still live. Whoever
sees a header pass learns whom it names: keep the service and its webserver on loopback, or behind TLS.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from governance.envsecrets import read_secret
from governance.errors import InvalidInput
from governance.service.sessions import Principal

PRINCIPAL_HEADER = "x-custody-principal"
SIGNING_VARIABLE = "CUSTODY_UI_SIGNING_KEY"
VERIFY_VARIABLE = "CUSTODY_UI_VERIFY_KEY"
# As long as the service waits for the webserver to answer a launch (assets/api_runs.py): the
# coordinator reads the header when Dagster submits the run, after it has loaded the job.
HEADER_SECONDS = 120
# A header this process signed never leaves it: good for longer than any launch takes.
OWN_HEADER_SECONDS = 3600
# What a signature is for, signed with the payload: a key used elsewhere signs nothing that counts here.
PURPOSE = b"custody-ui-request\n"
# How far ahead of this host's clock another host's may be.
SKEW_SECONDS = 5
_OWN = Ed25519PrivateKey.generate()
_OWN_PUBLIC = _OWN.public_key()


@dataclass(frozen=True)
class UiKeys:
    """The key pair of a service in front of a webserver served on its own."""

    signing: Ed25519PrivateKey

    @classmethod
    def new(cls) -> UiKeys:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> UiKeys:
        text = read_secret(environ, SIGNING_VARIABLE) or ""
        if not text:
            raise InvalidInput(
                f"--dagster-url needs {SIGNING_VARIABLE}, the key the webserver's requests are signed with: "
                "`custody serve --new-ui-keys` makes a pair"
            )
        return cls(Ed25519PrivateKey.from_private_bytes(_raw(text, SIGNING_VARIABLE)))

    def environ(self) -> dict[str, str]:
        """The pair as the service's and the webserver's environments take them."""
        private = self.signing.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        public = self.signing.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return {SIGNING_VARIABLE: _text(private), VERIFY_VARIABLE: _text(public)}


@dataclass(frozen=True)
class Signed:
    """What a header vouches for: a principal, for the one request whose digest it holds (see
    `request_digest`), by a nonce to be taken once."""

    principal: Principal
    nonce: str
    request: str


def request_digest(method: str, body: bytes) -> str:
    """What binds a header to one request: its method and its body, as the webserver reads them."""
    return hashlib.sha256(method.upper().encode() + b"\n" + body).hexdigest()


def signed_principal(principal: Principal, keys: UiKeys | None = None, *, method: str, body: bytes) -> str:
    """The header for `principal` making the request with `method` and `body`, signed with `keys`,
    else with this process's own key."""
    said = [
        principal.user,
        principal.method,
        principal.session,
        principal.channel,
        int(time.time()),
        secrets.token_urlsafe(16),
        request_digest(method, body),
    ]
    payload = base64.urlsafe_b64encode(json.dumps(said).encode())
    signing = keys.signing if keys is not None else _OWN
    return f"{payload.decode()}.{base64.urlsafe_b64encode(signing.sign(PURPOSE + payload)).decode()}"


def signed_for(header: str | None, method: str, body: bytes, environ: Mapping[str, str] = os.environ) -> Signed | None:
    """What a header signed for the request with `method` and `body` vouches for: signed by this
    process's gate, or lately by a service the webserver trusts by its CUSTODY_UI_VERIFY_KEY; None
    for anything else, a header signed for another request among them."""
    payload, _, signature = (header or "").encode().partition(b".")
    try:
        signed = base64.urlsafe_b64decode(signature)
    except (binascii.Error, ValueError):
        return None
    # The decoder skips what follows the padding: only the signature's own spelling is taken.
    if not payload or not signed or base64.urlsafe_b64encode(signed) != signature:
        return None
    if _verifies(_OWN_PUBLIC, signed, payload):
        found = _payload(payload, OWN_HEADER_SECONDS)
    else:
        trusted = environ.get(VERIFY_VARIABLE)
        found = (
            _payload(payload, HEADER_SECONDS) if trusted and _verifies(_trusted_key(trusted), signed, payload) else None
        )
    return found if found is not None and found.request == request_digest(method, body) else None


def _payload(payload: bytes, seconds: int) -> Signed | None:
    user, method, session, channel, signed_at, nonce, request = json.loads(base64.urlsafe_b64decode(payload))
    if not -SKEW_SECONDS <= time.time() - signed_at <= seconds:
        return None
    return Signed(Principal(user, method, session, channel), nonce, request)


def _verifies(key: Ed25519PublicKey, signature: bytes, payload: bytes) -> bool:
    try:
        key.verify(signature, PURPOSE + payload)
    except InvalidSignature:
        return False
    return True


@lru_cache(maxsize=4)
def _trusted_key(text: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(_raw(text, VERIFY_VARIABLE))


def _raw(text: str, variable: str) -> bytes:
    """The 32 bytes a key variable holds, base64url-encoded."""
    try:
        raw = base64.b64decode(text.strip() + "=" * (-len(text.strip()) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as err:
        raise InvalidInput(f"{variable} is not base64url: `custody serve --new-ui-keys` makes a pair") from err
    if len(raw) != 32:
        raise InvalidInput(f"{variable} holds {len(raw)} bytes, not an Ed25519 key's 32")
    return raw


def _text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")
