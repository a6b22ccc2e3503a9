"""What names a foreign run's datasets: which way it used them, and a digest of a name of any length;
and the states in which a run has ended."""

from __future__ import annotations

import hashlib

# A foreign run's datasets: those it read, and those it wrote.
INPUT, OUTPUT = "input", "output"
# A run's state follows its latest event; one that ended stays ended whatever comes after.
ENDED = ("COMPLETE", "FAIL", "ABORT")


def digest(*parts: object) -> str:
    return hashlib.sha256("\0".join(str(part) for part in parts).encode()).hexdigest()


def ident(namespace: str, name: str) -> str:
    """A dataset's namespace and name as one short digest, whatever their length."""
    return digest(namespace, name)
