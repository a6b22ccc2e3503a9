"""Device tokens: what a client keeps once its user has signed in from it, so that failed sign-ins
from elsewhere never slow that client's (governance.access.throttle). A token names its user and a
random id, signed with the service's key: it lets nobody in by itself, and counts only for the user
it names. A browser keeps it as a cookie; `custody login` beside its token."""

from __future__ import annotations

import secrets
from datetime import timedelta

from itsdangerous import BadData, URLSafeTimedSerializer

DEVICE_COOKIE = "custody_device"
# How long a client is known after its last sign-in: each sign-in gives it a token anew.
LIFETIME = timedelta(days=365)


class Devices:
    def __init__(self, secret: bytes):
        self._signer = URLSafeTimedSerializer(secret, salt="custody-device")

    def issue(self, user: str, device: str | None = None) -> str:
        """A token of `user`'s client: of the client `device` names, or of a new one."""
        return self._signer.dumps([user, device or secrets.token_urlsafe(18)])

    def of(self, token: str | None, user: str) -> str | None:
        """The id of the client `token` names, when the service made it for `user`, lately."""
        if not token:
            return None
        try:
            named, device = self._signer.loads(token, max_age=int(LIFETIME.total_seconds()))
        except (BadData, ValueError, TypeError):
            return None
        return str(device) if named == user and isinstance(device, str) else None
