"""Requests to the lake's object store signed for an engine that holds none of its keys (Iceberg's
remote signing, `s3.remote-signing-enabled`): the engine sends the request it is about to make, the
service signs it with the lake's credentials (the AWS SDK's default chain: the environment's keys,
a profile, a role) and sends back the headers to make it with. Only a read of one object in the
lake's bucket is signed; which objects a user may read is the catalog's decision
(governance.service.iceberg)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit

from governance.config import Settings
from governance.errors import AccessDenied, EnvironmentProblem, shown

if TYPE_CHECKING:
    from botocore.credentials import Credentials, ReadOnlyCredentials

READS = frozenset({"GET", "HEAD"})
# What a read of one object may ask besides the object: a part of it. Anything else (an ACL, tags,
# a listing, an upload) is no read of a version's file.
READ_QUERIES = frozenset({"partNumber", "x-id"})


@dataclass(frozen=True)
class ObjectRead:
    """A read of one object of the lake's bucket."""

    method: str
    key: str


class Signer:
    """Signs reads of the objects of the lake `settings` name."""

    def __init__(self, settings: Settings):
        if not settings.lake_url:
            raise EnvironmentProblem("the lake is a folder: there is no store to sign requests for")
        self.bucket = settings.lake_url.removeprefix("s3a://").split("/", 1)[0]
        self.region = settings.s3_region or "us-east-1"
        endpoint = settings.s3_endpoint or f"https://s3.{self.region}.amazonaws.com"
        parts = urlsplit(endpoint)
        self.scheme = parts.scheme
        self.hosts = {parts.netloc} if settings.s3_endpoint else {parts.netloc, "s3.amazonaws.com"}
        # The credentials last found, which a request signed at once is signed with.
        self._found: Credentials | None = None

    def read_of(self, method: str, uri: str) -> ObjectRead:
        """The object a request reads; AccessDenied for any other request (a write, another bucket
        or host, a listing, a query that is no read)."""
        if method not in READS:
            raise AccessDenied(f"denied: a {shown(method)} request is no read: only GET and HEAD are signed")
        parts = urlsplit(uri)
        if parts.scheme != self.scheme or parts.username or parts.password or parts.fragment:
            raise AccessDenied(f"denied: {shown(uri, 200)} is not a request to the lake's store")
        asked = {name for name, _ in parse_qsl(parts.query, keep_blank_values=True)}
        if asked - READ_QUERIES:
            raise AccessDenied(f"denied: {shown(uri, 200)} asks more of the store than an object's bytes")
        bucket, key = self._bucket_and_key(parts.netloc, parts.path)
        if bucket != self.bucket:
            raise AccessDenied(f"denied: {shown(uri, 200)} is not in the lake's bucket {self.bucket}")
        segments = key.split("/")
        if not key or any(segment in ("", ".", "..") for segment in segments):
            raise AccessDenied(f"denied: {shown(uri, 200)} names no object plainly")
        return ObjectRead(method, key)

    def _bucket_and_key(self, host: str, path: str) -> tuple[str, str]:
        if host in self.hosts:  # path-style: /bucket/key
            bucket, _, key = path.removeprefix("/").partition("/")
            return unquote(bucket), unquote(key)
        virtual = next((host.removesuffix(f".{known}") for known in self.hosts if host.endswith(f".{known}")), None)
        if virtual is None:
            return "", ""
        return virtual, unquote(path.removeprefix("/"))

    def sign(self, method: str, uri: str, headers: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """The headers to make the request with: the caller's, and AWS Signature Version 4's."""
        return self._signed(self._credentials().get_frozen_credentials(), method, uri, headers)

    def sign_at_once(self, method: str, uri: str, headers: Mapping[str, Sequence[str]]) -> dict[str, list[str]] | None:
        """The headers `sign` gives, when the credentials it signs with are at hand and need no
        renewing (which may ask the store's STS or the instance's metadata); None otherwise."""
        credentials = self._found
        # Static keys never need renewing; a role's (RefreshableCredentials) say when they do.
        renewing = getattr(credentials, "refresh_needed", None)
        if credentials is None or (renewing is not None and renewing()):
            return None
        return self._signed(credentials.get_frozen_credentials(), method, uri, headers)

    def _signed(
        self, credentials: ReadOnlyCredentials, method: str, uri: str, headers: Mapping[str, Sequence[str]]
    ) -> dict[str, list[str]]:
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(
            method=method, url=uri, headers={name: ", ".join(values) for name, values in headers.items()}
        )
        S3SigV4Auth(credentials, "s3", self.region).add_auth(request)
        return {name: [value] for name, value in request.headers.items()}

    def _credentials(self) -> Credentials:
        credentials = self._session.get_credentials()
        if credentials is None:
            raise EnvironmentProblem(
                "the service has no credentials of the lake's store to sign with: give AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, AWS_PROFILE or a role, as for the lake itself"
            )
        self._found = credentials
        return credentials

    @cached_property
    def _session(self):
        import botocore.session

        return botocore.session.get_session()
