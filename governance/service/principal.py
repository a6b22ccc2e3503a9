"""The principal a signed-in request carries to Dagster's webserver, served in the same process: a
header signed with a key made when this module is first imported and never kept anywhere else, so
Custody's run coordinator trusts it, and nothing a client sends, nor any other process, can stand
for it."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets

from governance.service.sessions import Principal

PRINCIPAL_HEADER = "x-custody-principal"
_KEY = secrets.token_bytes(32)


def signed_principal(principal: Principal) -> str:
    payload = base64.urlsafe_b64encode(
        json.dumps([principal.user, principal.method, principal.session, principal.channel]).encode()
    )
    return f"{payload.decode()}.{_mac(payload)}"


def principal_from(header: str | None) -> Principal | None:
    """The principal this process's gate signed, or None for anything else."""
    payload, _, mac = (header or "").encode().partition(b".")
    if not payload or not hmac.compare_digest(mac, _mac(payload).encode()):
        return None
    user, method, session, channel = json.loads(base64.urlsafe_b64decode(payload))
    return Principal(user, method, session, channel)


def _mac(payload: bytes) -> str:
    return hmac.new(_KEY, payload, hashlib.sha256).hexdigest()
