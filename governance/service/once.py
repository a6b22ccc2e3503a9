"""The headers the service signed for Dagster's webserver, each taken once, by its nonce: the run
coordinator takes a header as it decides the first run of its request, so that a header seen on its
way and sent again, to the webserver directly, launches nothing. Taken in the catalog, so that every
process serving the webserver knows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from governance.catalog import Catalog
from governance.catalog.models import SignedRequest

# Longer than any header is good for (see governance.service.principal): a nonce forgotten after
# this long is one no header still carries validly.
KEPT = timedelta(hours=2)


def take(catalog: Catalog, nonce: str) -> bool:
    """Whether the nonce is taken now, for the first time; the nonces of headers too old to be
    taken again go."""
    now = datetime.now(UTC)
    try:
        with catalog.session() as session:
            session.add(SignedRequest(nonce=nonce, taken_at=now))
            session.execute(delete(SignedRequest).where(col(SignedRequest.taken_at) < now - KEPT))
    except IntegrityError:
        return False
    return True
