"""A client of the Custody service, for whoever holds none of the catalog's, the lake's or the
directory's credentials: with CUSTODY_URL set, the CLI asks the service. Its token comes from
`custody login` (or CUSTODY_TOKEN) and is kept, readable by its owner only, in the user's config
folder, one per service URL."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests

from governance.config import SERVICE_URL_VARIABLE as URL_VARIABLE
from governance.errors import (
    AccessDenied,
    CustodyError,
    InvalidInput,
    NotFound,
    NotSignedIn,
    ServiceUnavailable,
    shown,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from governance.catalog.ledgerfilter import LedgerFilter

TOKEN_VARIABLE = "CUSTODY_TOKEN"
# The ledger entries one request asks for: the most the service sends at once.
LEDGER_PAGE = 10_000
TIMEOUT_SECONDS = 120
ERRORS: Mapping[int, type[CustodyError]] = {400: InvalidInput, 401: NotSignedIn, 403: AccessDenied, 404: NotFound}


TOKENS, DEVICES = "tokens.json", "devices.json"


def token_file(environ: Mapping[str, str], name: str = TOKENS) -> Path:
    """A file `custody login` keeps: the tokens, or (DEVICES) the device tokens."""
    config = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", str(Path.home()))) / ".config")
    return Path(config) / "custody" / name


class ServiceClient:
    def __init__(self, url: str, environ: Mapping[str, str]):
        self.url = url.rstrip("/")
        self.environ = environ
        self.http = requests.Session()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ServiceClient | None:
        """The client of the service CUSTODY_URL names; None without it (the CLI then works in process)."""
        url = environ.get(URL_VARIABLE, "").strip()
        if not url:
            return None
        if not url.startswith(("http://", "https://")):
            raise InvalidInput(f"{URL_VARIABLE}={url!r}: give the service's http:// or https:// address")
        return cls(url, environ)

    @property
    def in_clear(self) -> bool:
        """Whether a password would cross a network unencrypted: plain HTTP to another host."""
        parts = urlsplit(self.url)
        return parts.scheme == "http" and parts.hostname not in ("localhost", "127.0.0.1", "::1")

    def login(self, user: str, password: str) -> dict[str, Any]:
        """A token for `user`, kept for the next commands; the device token the service gives this
        client for `user` is kept for the next sign-in (governance.service.devices)."""
        device = f"{self.url} {user}"
        asked = {"user": user, "password": password, "device": self._kept(DEVICES).get(device)}
        answer = self._send("POST", "/tokens", json=asked, signed=False)
        self._keep(self.url, answer["token"])
        if answer.get("device"):
            self._keep(device, answer["device"], DEVICES)
        return answer

    def logout(self) -> None:
        """End the kept token at the service, and forget it."""
        try:
            self._send("DELETE", "/tokens/current")
        finally:
            self._keep(self.url, None)

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self._send("GET", path, params={k: v for k, v in (params or {}).items() if v is not None})

    def send(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """A change asked of the service (PUT, POST, DELETE), with a JSON body."""
        return self._send(method, path, json=body)

    def ledger(self, where: LedgerFilter) -> list[dict[str, Any]]:
        """The entries as the service gives them to an auditor, as JSON gives them (`ledger.entry_dict`):
        page after page until the limit, or the end."""
        found: list[dict[str, Any]] = []
        while where.limit is None or len(found) < where.limit:
            wanted = LEDGER_PAGE if where.limit is None else min(LEDGER_PAGE, where.limit - len(found))
            page = self._ledger_page(replace(where, limit=wanted))
            found.extend(page)
            if len(page) < wanted:
                break
            where = replace(where, from_seq=page[-1]["seq"] + 1)
        return found

    def _ledger_page(self, where: LedgerFilter) -> list[dict[str, Any]]:
        params = {
            "asset": where.asset,
            "version": where.version,
            "actor": where.actor,
            "action": where.action,
            "run": where.run_id,
            "since": where.since,
            "until": where.until,
            "from_seq": where.from_seq,
            "limit": where.limit,
        }
        return self.get("/ledger", params)

    def acting_as(self, user: str | None, named_by: str) -> None:
        """A request for `user` acts for whoever the token is: `user`, if given (by `named_by`), must be them."""
        if user is None:
            return
        who = self.get("/whoami")["user"]
        if who != user:
            raise InvalidInput(
                f"{named_by} names {user}, but the token of {self.url} is {who}'s: `custody login {user}`"
            )

    def fetch(self, path: str, params: Mapping[str, Any] | None = None) -> requests.Response:
        """The service's whole answer to a GET, for content that is not JSON: its headers say more."""
        return self._request("GET", path, params={k: v for k, v in (params or {}).items() if v is not None})

    def rows(self, asset: str, version: int | None, limit: int, columns: list[str] | None) -> tuple[str, int, pa.Table]:
        """The version's reference, its row count and its first `limit` rows."""
        import pyarrow as pa

        response = self.fetch(f"/assets/{asset}/rows", {"version": version, "limit": limit, "column": columns or None})
        table = pa.ipc.open_stream(response.content).read_all()
        return response.headers["X-Custody-Version"], int(response.headers["X-Custody-Rows"]), table

    def _send(self, method: str, path: str, *, signed: bool = True, **kwargs: Any) -> Any:
        response = self._request(method, path, signed=signed, **kwargs)
        return response.json() if response.content else None

    def _request(self, method: str, path: str, *, signed: bool = True, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token()}"} if signed else {}
        try:
            response = self.http.request(
                method, f"{self.url}/api/v1{path}", headers=headers, timeout=TIMEOUT_SECONDS, **kwargs
            )
        except requests.RequestException as err:
            raise ServiceUnavailable(
                f"the Custody service at {self.url} cannot be reached: {type(err).__name__}"
            ) from err
        if response.status_code >= 400:
            raise self._refusal(response)
        return response

    def _refusal(self, response: requests.Response) -> CustodyError:
        try:
            detail = str(response.json().get("detail"))
        except ValueError:
            detail = shown(response.text, 200)
        kind = ERRORS.get(response.status_code, InvalidInput if response.status_code < 500 else ServiceUnavailable)
        if kind is NotSignedIn:
            detail = f"{detail} (`custody login` gets a token from {self.url})"
        return kind(detail)

    def token(self) -> str:
        token = self.environ.get(TOKEN_VARIABLE) or self._kept().get(self.url)
        if not token:
            raise NotSignedIn(f"no token for {self.url}: `custody login` gets one")
        return str(token)

    def _kept(self, name: str = TOKENS) -> dict[str, str]:
        path = token_file(self.environ, name)
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except ValueError as err:
            raise InvalidInput(f"{path}: not the tokens `custody login` keeps; delete it and log in again") from err
        return kept if isinstance(kept, dict) else {}

    def _keep(self, key: str, token: str | None, name: str = TOKENS) -> None:
        """Keep `token` under `key` (or forget it), in a file only its owner can read."""
        path = token_file(self.environ, name)
        kept = {kept: value for kept, value in self._kept(name).items() if kept != key}
        if token is not None:
            kept[key] = token
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.unlink(missing_ok=True)  # a leftover keeps its own mode; a new file gets 0600
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            json.dump(kept, out)
        os.replace(temporary, path)
