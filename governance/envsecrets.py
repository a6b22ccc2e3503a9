"""Secrets the service reads from its environment, or from a file the environment names.

`NAME_FILE=/path` gives the secret NAME in a file its owner alone may read, as well-kept servers take
theirs: it is then never in any process's environment. A secret given in the environment itself is
read once, then scrubbed: its value is overwritten where the process keeps it, so that what the
kernel shows of the process's environment (`/proc/<pid>/environ`, readable by every process of its
OS user, run workers among them) no longer holds it, and taken out of the environment the programs
the process starts inherit.
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from governance.errors import InvalidInput, error_summary

FILE_SUFFIX = "_FILE"
# The most a secret's file may hold: a key or a password, never a file that happens to be named.
LARGEST = 64 * 1024


def read_secret(environ: Mapping[str, str], name: str) -> str | None:
    """The secret NAME, from the file NAME_FILE names, else from NAME; None when neither is set.
    InvalidInput for both at once, or a file that others may read or that cannot be read."""
    given, path = environ.get(name), environ.get(name + FILE_SUFFIX)
    if path is None:
        return given
    if given is not None:
        raise InvalidInput(f"{name} and {name}{FILE_SUFFIX} are both set: give the secret one way")
    return _from_file(Path(path), name + FILE_SUFFIX)


def _from_file(path: Path, variable: str) -> str:
    """The secret in `path`: a file (not a link to one) of this process's OS user or root, which
    no one else may read, checked as it is opened."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NOCTTY)
    except OSError as err:
        raise InvalidInput(f"{variable}={path}: cannot read it: {err.strerror or err}") from err
    with os.fdopen(descriptor, "rb") as opened:
        status = os.fstat(opened.fileno())
        if not stat.S_ISREG(status.st_mode) or status.st_size > LARGEST:
            raise InvalidInput(f"{variable}={path}: not a file holding a secret")
        if status.st_uid not in (os.getuid(), 0):
            raise InvalidInput(f"{variable}={path}: it is another OS user's: the service's user or root must own it")
        if status.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise InvalidInput(f"{variable}={path}: others may read it: `chmod 600 {path}`")
        try:
            text = opened.read(LARGEST).decode("utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise InvalidInput(f"{variable}={path}: cannot read it: {error_summary(err)}") from err
    return text.rstrip("\r\n")


def scrub(names: Iterable[str]) -> None:
    """Overwrite the values of the secrets `names` where this process keeps its environment, then
    take them out of it, and the names of their files too: the programs it starts need neither."""
    names = [*names, *(name + FILE_SUFFIX for name in names)]
    wanted = {name.encode() + b"=" for name in names if name in os.environ}
    if not wanted:
        return
    for entry in _entries():
        text = ctypes.string_at(entry)
        prefix = next((p for p in wanted if text.startswith(p)), None)
        if prefix is not None:
            ctypes.memset(entry + len(prefix), ord("*"), len(text) - len(prefix))
    for name in names:
        os.environ.pop(name, None)


def _entries() -> list[int]:
    """The addresses of the C library's `environ` strings."""
    environ = ctypes.POINTER(ctypes.c_void_p).in_dll(ctypes.CDLL(None), "environ")
    found = []
    index = 0
    while environ[index]:
        found.append(int(environ[index]))
        index += 1
    return found
