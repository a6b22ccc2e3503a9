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

from governance.errors import BatchError, StorageFull, error_summary, shown
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
    """Turn a write that ran out of space, Spark's or Python's, into StorageFull naming the lake;
    other failures pass through as they are."""
    try:
        yield
    except (Py4JJavaError, PySparkException, OSError) as err:
        if not out_of_space(err):
            raise
        raise StorageFull(f"no space left on device writing {lake_root}") from err


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
