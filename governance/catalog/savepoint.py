"""A savepoint written to the database driver, beside the ORM: SQLAlchemy's own nested transaction
costs more than the statements a busy writer puts in it. For work done with the transaction's own
statements only: the session knows nothing of it, so objects the ORM holds are not rolled back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from governance.errors import TransactionLost, error_summary


@contextmanager
def savepoint(cursor: Any, name: str, error: type[Exception]) -> Iterator[None]:
    """The block's statements undone if it raises, the transaction's others kept. `error` is what
    the driver raises: a savepoint it cannot go back to is TransactionLost (a full disk or an I/O
    error makes SQLite end the whole transaction), and nothing more may be written."""
    cursor.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException as failed:
        try:
            cursor.execute(f"ROLLBACK TO SAVEPOINT {name}")
            cursor.execute(f"RELEASE SAVEPOINT {name}")
        except error as lost:
            raise TransactionLost(f"the transaction ended on a database error: {error_summary(failed)}") from lost
        raise
    try:
        cursor.execute(f"RELEASE SAVEPOINT {name}")
    except error as lost:
        raise TransactionLost(f"the transaction ended on a database error: {error_summary(lost)}") from lost
