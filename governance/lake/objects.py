"""A lake in an S3-compatible object store (`CUSTODY_LAKE=s3a://bucket/prefix`).

An object store has no rename, no fsync and no flock, which the folder lake commits with. Here an
attempt writes its objects under `_attempts/<attempt>/` and they stay there as its version: the
catalog's row, written in one transaction, is the commit, and nothing outside Custody's catalog
or table snapshots points at an attempt's objects before it. A manifest is one object, put whole.
The attempt's lock lives in the local lake folder of the process that runs it; an attempt whose
lock nobody holds and that no version names is removed by `custody repair`.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path, PurePath, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from governance.config import Settings
from governance.errors import EnvironmentProblem, UnsafePath, error_summary
from governance.zones import MANIFEST, AssetKey, Lake, Published, Staging, Zone

if TYPE_CHECKING:
    from governance.lake.snapshots import TableSnapshots

ATTEMPTS = "_attempts"
SCHEMES = ("s3a://", "s3://", "s3n://")
# How long a request waits for the store to answer before it is retried, then reported.
TIMEOUT_SECONDS = 10
REFUSED_CREDENTIALS = ("AccessDenied", "ACCESS_DENIED", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden")


class ObjectLake(Lake):
    """The lake's versions in an object store; its DropZone and its attempts' locks in `local`."""

    versions_stay_staged = True

    def __init__(self, url: str, fs: pafs.FileSystem, local: Path, tables: TableSnapshots | None = None):
        super().__init__(local, tables, fs)
        self.url = url
        self.base = PurePosixPath(url.removeprefix("s3a://"))
        # Attempts whose staged objects a commit in progress has made its version's.
        self._kept: set[str] = set()

    @property
    def name(self) -> str:
        return self.url

    def uri(self, folder: PurePath) -> str:
        return f"s3a://{folder}" if not isinstance(folder, Path) else str(folder)

    def file_uri(self, path: PurePath) -> str:
        return f"s3://{path}"

    def holds(self, folder: PurePath, uri: str) -> bool:
        key = _key(uri)
        return key is not None and (key == str(folder) or key.startswith(f"{folder}/"))

    def location_of(self, uri: str) -> str | None:
        key = _key(uri)
        if key is None:
            return None
        path = PurePosixPath(posixpath.normpath(key))
        return path.relative_to(self.base).as_posix() if path.is_relative_to(self.base) else None

    def folder_of(self, uri: str) -> str | None:
        key = _key(uri)
        if key is None:
            return None
        try:
            return self.stored(PurePosixPath(key).parent)
        except UnsafePath:
            return None

    def at(self, stored: str) -> PurePath:
        relative = PurePosixPath(stored)
        if relative.is_absolute() or ".." in relative.parts or not relative.parts:
            raise UnsafePath(f"the catalog names {stored}, which is not a location under {self.url}")
        return self.base / relative

    def stored(self, path: PurePath) -> str:
        if isinstance(path, Path):  # a DropZone file, in the local folder
            return super().stored(path)
        try:
            return PurePosixPath(path).relative_to(self.base).as_posix()
        except ValueError as err:
            raise UnsafePath(f"{self.uri(path)} is outside the lake {self.url}") from err

    def asset_uri(self, zone: Zone, key: AssetKey) -> str:
        # Only a name for the asset's versions: their objects are kept under their attempts.
        return self.uri(self.base / zone.value / key.domain / key.name)

    def version_dirs(self, zone: Zone, key: AssetKey) -> dict[int, Path]:
        return {}

    def stage(self, attempt_id: str) -> Staging:
        lock = self.staging_root / f"{attempt_id}.lock"
        return Staging(self.base / ATTEMPTS / attempt_id, lock, self, lock_elsewhere_when_absent=True)

    @contextmanager
    def staging(self, attempt_id: str) -> Iterator[Staging]:
        stage = self.stage(attempt_id)
        with stage.locked():
            try:
                yield stage
            finally:
                if attempt_id not in self._kept:
                    # Best effort: the attempt's own outcome is what its caller must hear, and
                    # `custody repair` removes what is left of an attempt that ended without a version.
                    with suppress(OSError):
                        self._remove(stage.path)
                self._kept.discard(attempt_id)

    def staging_attempts(self) -> list[str]:
        listed = self._listing(self.base / ATTEMPTS)
        stored = {PurePosixPath(info.path).name for info in listed if info.type == pafs.FileType.Directory}
        return sorted(stored | set(super().staging_attempts()))

    def remove_stage(self, stage: Staging) -> None:
        self._remove(stage.path)
        stage.lock_file.unlink(missing_ok=True)

    def seal(self, folder: PurePath, suffix: str) -> list[PurePath]:
        """The part files Spark wrote, in name order, keeping their names: an object store copies to
        rename. Spark's bookkeeping objects are deleted."""
        parts = []
        for info in self._listing(folder):
            name = PurePosixPath(info.path).name
            if info.type != pafs.FileType.File:
                continue
            if name.startswith(("_", ".")):
                self.fs.delete_file(info.path)
            else:
                parts.append(PurePosixPath(info.path))
        return sorted(parts)

    def write_manifest(self, folder: PurePath, manifest: dict[str, Any]) -> None:
        """One object, put whole: a reader finds the manifest complete or not at all."""
        with self.fs.open_output_stream(str(folder / MANIFEST)) as stream:
            stream.write(json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8"))

    def publish(self, stage: Staging, zone: Zone, key: AssetKey, number: int, quarantine: bool) -> Published:
        """Nothing moves: the staged objects become the version when the catalog's transaction commits."""
        attempt_id = PurePosixPath(stage.path).name
        self._kept.add(attempt_id)
        return Published(stage.data, stage.quarantine if quarantine else None, lambda: self._kept.discard(attempt_id))

    def delete(self, folder: PurePath, ref: str) -> None:
        attempts = self.base / ATTEMPTS
        within = PurePosixPath(folder)
        if not within.is_relative_to(attempts) or len(within.relative_to(attempts).parts) < 2:
            raise UnsafePath(f"refusing to delete {self.uri(folder)} of {ref}: not a version's objects")
        attempt = attempts / within.relative_to(attempts).parts[0]
        try:
            self._remove(folder)
            if self.holds_nothing(attempt):  # S3A's empty folder markers are all that is left of it
                self._remove(attempt)
        except OSError as err:
            raise EnvironmentProblem(f"cannot delete {self.uri(folder)} of {ref}: {err}; run the purge again") from err

    def _remove(self, folder: PurePath) -> None:
        try:
            self.fs.delete_dir(str(folder))
        except FileNotFoundError:
            return

    def _listing(self, folder: PurePath) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(pafs.FileSelector(str(folder), allow_not_found=True))


def _key(uri: str) -> str | None:
    """`bucket/key` of an S3 URI, whichever of its schemes Spark or a table names it with, and
    whether or not it is percent-encoded."""
    key = next((uri.removeprefix(scheme) for scheme in SCHEMES if uri.startswith(scheme)), None)
    return unquote(key) if key is not None else None


def object_store(settings: Settings) -> pafs.S3FileSystem:
    """The S3 client of the lake `settings` name, checked to reach its bucket. Credentials come from
    the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the AWS SDK's other sources)."""
    options: dict[str, Any] = {
        "region": settings.s3_region or "us-east-1",
        "connect_timeout": TIMEOUT_SECONDS,
        "request_timeout": TIMEOUT_SECONDS,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=3),
    }
    if settings.s3_endpoint:
        endpoint = urlparse(settings.s3_endpoint)
        if endpoint.username or endpoint.password:  # not shown: it holds credentials
            raise EnvironmentProblem(
                "CUSTODY_S3_ENDPOINT: credentials may not be part of the address; give them in "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            )
        if endpoint.scheme not in ("http", "https") or not endpoint.netloc:
            raise EnvironmentProblem(
                f"CUSTODY_S3_ENDPOINT: {settings.s3_endpoint!r} is not an address such as http://127.0.0.1:9000"
            )
        options |= {"endpoint_override": endpoint.netloc, "scheme": endpoint.scheme, "force_virtual_addressing": False}
    fs = pafs.S3FileSystem(**options)
    _check_bucket(fs, settings)
    return fs


def _check_bucket(fs: pafs.S3FileSystem, settings: Settings) -> None:
    bucket = settings.lake_url.removeprefix("s3a://").split("/", 1)[0]
    where = settings.s3_endpoint or f"AWS region {settings.s3_region or 'us-east-1'}"
    try:
        info = fs.get_file_info(bucket)
    except OSError as err:
        if any(code in str(err) for code in REFUSED_CREDENTIALS):
            raise EnvironmentProblem(
                f"CUSTODY_LAKE: the object store at {where} refused the credentials for bucket {bucket!r}: "
                "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            ) from err
        named_by = "CUSTODY_S3_ENDPOINT names it: is it running?" if settings.s3_endpoint else "CUSTODY_S3_REGION"
        raise EnvironmentProblem(
            f"CUSTODY_LAKE: cannot reach the object store at {where} for bucket {bucket!r} ({named_by}): "
            f"{error_summary(err)}"
        ) from err
    if info.type == pafs.FileType.NotFound:
        if settings.s3_endpoint and (other := _not_s3(settings.s3_endpoint, bucket)):
            raise EnvironmentProblem(f"CUSTODY_S3_ENDPOINT: {other}")
        raise EnvironmentProblem(f"CUSTODY_LAKE: the bucket {bucket!r} does not exist at {where}; create it first")


def _not_s3(endpoint: str, bucket: str) -> str | None:
    """What a server that answered "not found" for the bucket is, when it does not answer as an S3
    store does (an error document whose root is `Error`, with a `Code`); None when it does."""
    import urllib.error
    import urllib.request
    from xml.etree import ElementTree

    try:
        with urllib.request.urlopen(f"{endpoint.rstrip('/')}/{bucket}", timeout=10) as answer:
            status, kind, body = answer.status, answer.headers.get_content_type(), answer.read(4096)
    except urllib.error.HTTPError as err:
        status, kind, body = err.code, err.headers.get_content_type(), err.read(4096)
    except OSError:
        return None  # the store's own client has said it answers; nothing more to learn here
    try:
        document = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        document = None
    if document is not None and document.tag == "Error" and document.find("Code") is not None:
        return None
    return f"the server at {endpoint} does not answer as an S3 object store does (HTTP {status}, {kind})"


def pyiceberg_properties(settings: Settings) -> dict[str, str]:
    """How PyIceberg reaches the store; it reads the credentials from the environment itself."""
    properties = {"s3.region": settings.s3_region or "us-east-1"}
    if settings.s3_endpoint:
        properties |= {"s3.endpoint": settings.s3_endpoint, "s3.force-virtual-addressing": "false"}
    return properties


# The tries of one request to the store, the SDK's and S3A's: a step that fails for a store that did
# not answer is tried again as a whole (assets/factory.py INGEST_RETRY).
S3A_ATTEMPTS = 1
# S3A's own providers of keys its settings hold (a session's spark-defaults may), then the AWS
# SDK's default chain, which S3A takes by its class name.
DEFAULT_CHAIN = (
    "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider,"
    "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider,"
    "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
)


def hadoop_conf(settings: Settings) -> dict[str, str]:
    """Hadoop's S3A settings for the lake's store, for Spark (each key under `spark.hadoop.`).
    Credentials are not among them: S3A finds them as the AWS SDK does, by its default chain (the
    environment's keys, a profile, web identity, a container's or an instance's role), as Custody's
    own clients and PyIceberg do (S3A's own list would skip a profile), after keys S3A's settings hold."""
    timeout = f"{settings.s3_timeout}s"
    conf = {
        "fs.s3a.aws.credentials.provider": DEFAULT_CHAIN,
        # A store that stops answering fails the write in about S3A_ATTEMPTS × the timeout (S3A's
        # own defaults retry for many minutes), with a line saying it did not answer.
        "fs.s3a.connection.establish.timeout": timeout,
        "fs.s3a.connection.timeout": timeout,
        "fs.s3a.connection.request.timeout": timeout,
        "fs.s3a.attempts.maximum": str(S3A_ATTEMPTS),
        "fs.s3a.retry.limit": str(S3A_ATTEMPTS),
        "fs.s3a.endpoint.region": settings.s3_region or "us-east-1",
        # Iceberg's metadata names the files as s3://, the scheme other engines read.
        "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
    if settings.s3_endpoint:
        conf |= {
            "fs.s3a.endpoint": settings.s3_endpoint,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": str(settings.s3_endpoint.startswith("https:")).lower(),
        }
    return conf
