"""What names a foreign run's datasets: which way it used them, and a digest of a name of any length."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

# A foreign run's datasets: those it read, and those it wrote.
INPUT, OUTPUT = "input", "output"
# The most ids one query asks for.
CHUNK = 5_000


def digest(*parts: object) -> str:
    return hashlib.sha256("\0".join(str(part) for part in parts).encode()).hexdigest()


def ident(namespace: str, name: str) -> str:
    """A dataset's namespace and name as one short digest, whatever their length."""
    return digest(namespace, name)


def chunks(items: list[Any]) -> Iterator[list[Any]]:
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]
