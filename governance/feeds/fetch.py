"""One download of a feed over HTTP(S), bounded in size and time.

Errors say what happened (a status, a time-out, a refused connection) but never quote the request:
its URL and headers may hold secrets, even percent-encoded where masking would miss them.
"""

from __future__ import annotations

import time

import requests
import urllib3

from governance.errors import TransientError
from governance.feeds.templates import Filled

CHUNK = 64 * 1024


class FetchFailed(TransientError):
    """A download that did not bring a whole body; the collector retries it."""


class TooLarge(FetchFailed):
    """A body over the feed's max_bytes; it is not kept."""


def fetch(session: requests.Session, request: Filled, *, timeout: float, max_bytes: int) -> bytes:
    """The body of one GET, refused when over `max_bytes` or slower than `timeout` in all.

    Redirects are not followed: the request's headers, and the secrets they may hold, would go to
    wherever the answer points."""
    deadline = time.monotonic() + timeout
    try:
        # Uncompressed: a decoder may read on and on without giving a byte, past any deadline.
        headers = {"Accept-Encoding": "identity", **dict(request.headers)}
        with session.get(request.url, headers=headers, timeout=timeout, stream=True, allow_redirects=False) as response:
            if response.is_redirect:
                raise FetchFailed(
                    f"HTTP {response.status_code}: a redirect, not followed (the headers would go with "
                    "it); give the URL it leads to"
                )
            if response.status_code >= 400:
                raise FetchFailed(f"HTTP {response.status_code} {response.reason or ''}".strip())
            encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise FetchFailed(
                    f"the body came compressed ({encoding}) though asked for as it is; "
                    "it is not kept, as it could not be read within the timeout"
                )
            declared = response.headers.get("Content-Length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise TooLarge(f"the body is {int(declared):,} bytes, over max_bytes {max_bytes:,}")
            return _body(response, deadline, timeout, max_bytes)
    # `from None`: a cause's text would quote the URL.
    except (requests.Timeout, urllib3.exceptions.TimeoutError):
        raise FetchFailed(f"no answer within {timeout:g}s") from None
    except (requests.ConnectionError, urllib3.exceptions.ProtocolError):
        raise FetchFailed("the connection failed or was refused") from None
    except (requests.RequestException, urllib3.exceptions.HTTPError) as err:
        if time.monotonic() > deadline:
            raise FetchFailed(f"the body took longer than {timeout:g}s") from None
        raise FetchFailed(f"the request failed ({type(err).__name__})") from None


def _body(response: requests.Response, deadline: float, timeout: float, max_bytes: int) -> bytes:
    """Read the body a piece at a time as it arrives, so that the deadline is checked between pieces:
    a server feeding a byte at a time would keep one long read alive within the socket's time-out."""
    body = bytearray()
    while chunk := response.raw.read1(CHUNK, decode_content=False):
        body += chunk
        if len(body) > max_bytes:
            raise TooLarge(f"the body passed max_bytes {max_bytes:,}")
        if time.monotonic() > deadline:
            raise FetchFailed(f"the body took longer than {timeout:g}s")
    return bytes(body)
