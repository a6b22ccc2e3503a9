"""How sensitive an asset's data is: apart from the spec's model, for what only names a class (the
CLI's options)."""

from __future__ import annotations

from enum import StrEnum


class Classification(StrEnum):
    PUBLIC = "public"
    INTERNAL = "internal"
    CONFIDENTIAL = "confidential"
    RESTRICTED = "restricted"


RANK = {c: i for i, c in enumerate(Classification)}
