"""Spark failures read for what they say: a batch file Spark cannot read is bad input, a write that
found no space left is the lake's file system full; each named in one line, and never worth a retry."""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.errors import PySparkException

from governance.errors import BatchError, EnvironmentProblem, ObjectStoreUnavailable, StorageFull, error_summary, shown
from governance.zones import local_path

READ_FAILURE = "FAILED_READ_FILE"
FILE_IN_MESSAGE = re.compile(r"Encountered error while reading file (\S+?)\.?(?:\s|$)")
# The JVM's own words that say nothing about the file: the generic wrapper of a failed read.
WRAPPERS = ("org.apache.spark.SparkException",)
MAX_REASON = 200
# What the JVM's IOException says for ENOSPC, wrapped by Hadoop and Spark as it rises.
NO_SPACE = "No space left on device"


@contextmanager
def reading(files: list[Path], fmt: str) -> Iterator[None]:
    """Turn a Spark failure to read one of `files` into a BatchError naming it and why; other
    failures pass through as they are."""
    try:
        yield
    except (Py4JJavaError, PySparkException) as err:
        found = unreadable(err, files)
        if found is None:
            raise
        path, why = found
        raise BatchError(f"{path}: cannot be read as {fmt_name(fmt)}: {why}") from err


@contextmanager
def writing(lake_root: str) -> Iterator[None]:
    """Turn a write that ran out of space, Spark's or Python's, into StorageFull naming the lake, and
    one an object store refused or did not answer into one line naming the object and why; other
    failures pass through as they are."""
    try:
        yield
    except (Py4JJavaError, PySparkException, OSError) as err:
        if out_of_space(err):
            raise StorageFull(f"no space left on device writing {lake_root}") from err
        if (failed := store_failure(err, lake_root)) is not None:
            raise failed from err
        raise


# What S3A and the AWS SDK say, as they rise through Hadoop and Spark, for a store that refused a
# request or could not be reached: the line to show (naming the object), and whether a later try of
# the step may pass.
REFUSED = "the object store refused writing {target}: "
STORE_CAUSES = (
    (
        "NoAuthWithAWSException",
        REFUSED + "no credentials were found (the environment's keys, a profile or a role)",
        False,
    ),
    ("AccessDenied", REFUSED + "access denied: these credentials may not write there", False),
    ("InvalidAccessKeyId", REFUSED + "the store does not know these credentials", False),
    ("SignatureDoesNotMatch", REFUSED + "the store refused the credentials' signature", False),
    ("UnknownHostException", "the object store's host is not known, writing {target}", False),
    # Waited for already, CUSTODY_S3_TIMEOUT for each request: the step is not run again to wait more.
    *(
        (words, "the object store did not answer in time writing {target} (CUSTODY_S3_TIMEOUT: per request)", False)
        for words in ("ApiCallTimeoutException", "SocketTimeoutException", "timed out")
    ),
    ("ConnectException", "the object store refused the connection, writing {target}", True),
    ("Connection refused", "the object store refused the connection, writing {target}", True),
)
STORE_CLASSES = ("org.apache.hadoop.fs.s3a.", "software.amazon.awssdk.", "java.nio.file.AccessDeniedException")
# S3A names the object in its messages: as a URI, or first, as a key in the lake's bucket.
OBJECT_URI = re.compile(r"s3a?://[^\s:]+")
OBJECT_KEY = re.compile(r"^([\w.=-]+(?:/[\w.=-]+)+): ")


def store_failure(err: Exception, lake_root: str) -> EnvironmentProblem | ObjectStoreUnavailable | None:
    """One line for a write an object store refused (not worth a retry) or did not answer (worth
    one): the object it was writing, and why. None for any other failure."""
    if not lake_root.startswith("s3a://"):
        return None
    chain = list(_java_chain(err))
    if not any(name.startswith(STORE_CLASSES) for name, _, _ in chain):
        return None
    said = " ".join(f"{name} {message}" for name, message, _ in chain)
    found = next(((line, transient) for words, line, transient in STORE_CAUSES if words in said), None)
    if found is None:
        return None
    line, transient = found
    target = next(filter(None, (_object_in(message, lake_root) for _, message, _ in chain)), lake_root)
    return (ObjectStoreUnavailable if transient else EnvironmentProblem)(line.format(target=target))


def _object_in(message: str, lake_root: str) -> str | None:
    """The object an S3A message begins with, as a URI; None when it begins with none."""
    if uri := OBJECT_URI.search(message):
        return uri.group(0)
    if key := OBJECT_KEY.match(message):
        bucket = lake_root.removeprefix("s3a://").split("/", 1)[0]
        return f"s3a://{bucket}/{key.group(1)}"
    return None


def out_of_space(err: Exception) -> bool:
    if isinstance(err, OSError):
        return err.errno == errno.ENOSPC
    return any(NO_SPACE in message for _name, message, _ in _java_chain(err))


def fmt_name(fmt: str) -> str:
    return "Parquet" if fmt == "parquet" else fmt.upper()


def unreadable(err: Exception, files: list[Path]) -> tuple[Path, str] | None:
    """The batch file a failed Spark job could not read, and the innermost reason it gave."""
    by_path = {f.resolve(): f for f in files}
    chain = list(_java_chain(err)) or [(type(err).__name__, str(err), _parameters(err))]
    for _name, message, parameters in chain:
        uri = parameters.get("path") or _path_in(message)
        if uri and local_path(uri).resolve() in by_path:
            return by_path[local_path(uri).resolve()], _reason(chain)
    return None


def _path_in(message: str) -> str | None:
    match = FILE_IN_MESSAGE.search(message)
    return match.group(1) if match else None


def _reason(chain: list[tuple[str, str, dict[str, str]]]) -> str:
    name, message, _ = chain[-1]
    if name in WRAPPERS and len(chain) > 1:
        name, message, _ = chain[-2]
    first = message.strip().splitlines()[0] if message.strip() else name.rsplit(".", 1)[-1]
    # Thrift names the reader object after the message: noise to a producer.
    first = re.sub(r"\s*Struct: \S+@[0-9a-f]+$", "", first)
    return shown(first, MAX_REASON)


def _parameters(err: Exception) -> dict[str, str]:
    if isinstance(err, PySparkException):
        return dict(err.getMessageParameters() or {})
    return {}


def _java_chain(err: Exception) -> Iterator[tuple[str, str, dict[str, str]]]:
    """Class name, message and error parameters of the Java exception and each of its causes."""
    if not isinstance(err, Py4JJavaError):
        return
    throwable = err.java_exception
    seen = 0
    try:
        while throwable is not None and seen < 20:
            seen += 1
            yield throwable.getClass().getName(), str(throwable.getMessage() or ""), _java_parameters(throwable)
            throwable = throwable.getCause()
    except Py4JError as gone:  # the JVM went away while the chain was read: what was read stands
        yield "py4j", error_summary(gone), {}


def _java_parameters(throwable) -> dict[str, str]:
    try:
        condition = throwable.getCondition()
    except Py4JError:
        return {}
    if not condition or not str(condition).startswith(READ_FAILURE):
        return {}
    parameters = throwable.getMessageParameters()
    return {str(key): str(parameters.get(key)) for key in parameters.keySet()}
