"""One exception hierarchy for Custody; every message names the file, field, line, asset or user."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def error_summary(err: BaseException) -> str:
    """The first line of an error's message (Spark's run to pages), or its type when it has none."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


# The most a reason in the ledger or an attempt row holds: a failure's trace belongs in the run's log.
REASON_LIMIT = 500


def bounded_reason(text: str) -> str:
    """A failure's reason as the ledger keeps it: at most REASON_LIMIT characters."""
    text = text.strip()
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 1] + "…"


def reason_of(err: BaseException) -> str:
    """Why `err` happened, bounded: a Custody error's message, or another's type and first line."""
    text = str(err) if isinstance(err, CustodyError) else f"{type(err).__name__}: {error_summary(err)}"
    return bounded_reason(text)


def printable(text: str, keep: str = "") -> str:
    """`text` with control and other unprintable characters escaped (`\\x1b`), but those in `keep`:
    what a terminal shows as it is, with no escape sequence of someone else's."""
    return "".join(ch if ch.isprintable() or ch in keep else ascii(ch)[1:-1] for ch in text)


def shown(text: str, limit: int = 64) -> str:
    """A user- or data-derived string as a message may quote it: printable, cut to `limit` characters."""
    escaped = printable(text)
    return escaped if len(escaped) <= limit else escaped[: limit - 1] + "…"


class CustodyError(Exception):
    """Base of every error Custody raises on purpose. `exit_code` follows the CLI contract."""

    exit_code = 1
    retryable = False


class InvalidInput(CustodyError):
    """Bad input from a user: a spec, a batch, a name, a request. Never retried."""


class InvalidName(InvalidInput):
    """A name or key that does not match the naming rules."""


class UnsafePath(InvalidInput):
    """A path that would leave its zone once resolved."""


@dataclass(frozen=True)
class SpecProblem:
    """One problem in one spec file, located as precisely as the YAML allows."""

    file: str
    field: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"


class UnsafeYaml(InvalidInput):
    """Valid YAML that Custody refuses to load: an alias (`*name`), or nesting past a depth.
    `reason` says which, `line` where."""

    def __init__(self, line: int, reason: str):
        self.line, self.reason = line, reason
        super().__init__(f"line {line}: {reason}")


class SpecError(InvalidInput):
    """Every problem found in a folder of specs, reported at once."""

    def __init__(self, problems: Sequence[SpecProblem]):
        self.problems = tuple(problems)
        count = len(self.problems)
        head = f"{count} problem{'s' if count != 1 else ''} in asset specs"
        super().__init__("\n".join([head, *(f"  {p}" for p in self.problems)]))


class BatchError(InvalidInput):
    """A DropZone batch that cannot be ingested as it is."""


class DuplicateBatch(BatchError):
    """A batch whose content or id was already ingested."""


class ValidationFailed(InvalidInput):
    """Rows that break the spec beyond what the spec tolerates."""


class TransformError(InvalidInput):
    """An integration transform that failed or returned something unusable."""


class UndeclaredRead(TransformError):
    """A transform read data its spec does not declare, or another version than the pinned one."""


class SourceRefused(InvalidInput):
    """A database source that refuses the read: wrong credentials, an unknown table, a query it cannot run."""


class TokenRequestRefused(InvalidInput):
    """A request to the OAuth 2.0 token endpoint refused, with the error RFC 6749 (5.2) names."""

    def __init__(self, error: str, description: str, status: int = 400):
        super().__init__(description)
        self.error = error
        self.status = status


class RequestTooLarge(InvalidInput):
    """A request to the service whose body is larger than a request may send."""


class Protected(InvalidInput):
    """A version that critical lineage depends on cannot be purged."""


class InUse(InvalidInput):
    """A version that a run in progress reads cannot be purged until the run has ended."""


class NotFound(CustodyError):
    """An asset, version, batch or entry that does not exist."""

    exit_code = 4


class NoSuchNamespace(NotFound):
    """A namespace of the lake's Iceberg catalog that holds no table the user may read."""


class UnsupportedRequest(CustodyError):
    """A request the service does not serve: a write through the lake's Iceberg catalog among them,
    for Custody's ingestion alone writes the lake."""


class AccessDenied(CustodyError):
    """A request refused by policy."""

    exit_code = 3


class NotSignedIn(AccessDenied):
    """A request to the service without a valid session or token: none, expired, ended, or signed
    with another key."""


class CrossSite(AccessDenied):
    """A request a page of another site sent: refused whatever session or token it carries."""


class UntrustedGateway(AccessDenied):
    """A request naming its user in the gateway's header, but not sent by the gateway: from a peer
    outside its allow-list, or without its shared secret."""


class DuplicateGatewayHeader(UntrustedGateway):
    """A request carrying the gateway's user header or its secret's header more than once: which one
    the gateway set cannot be told."""


class SettingDisagrees(AccessDenied):
    """The environment names a policy setting other than the one pinned in the catalog."""


class DirectoryUnavailable(AccessDenied):
    """The directory could not be asked: down, refusing, or not trusted. Access fails closed."""


class EnvironmentProblem(CustodyError):
    """The machine lacks something Custody needs, such as Java 17 for Spark."""


class CatalogReadOnly(EnvironmentProblem):
    """The catalog refuses this process's writes: a SQLite file, or the folder beside it, it may not
    write; a PostgreSQL role without the privilege, or a server that only reads."""


class CatalogStorageFailed(CatalogReadOnly):
    """The catalog's storage failed under it: a file system with no room left, an I/O error."""


class StorageFull(EnvironmentProblem):
    """The lake's file system has no space left: retried before someone frees space, a write fails the same way."""


class TableSnapshotError(EnvironmentProblem):
    """A version's Iceberg table snapshot could not be made or withdrawn: the catalog's version is
    unaffected, and `custody repair` aligns the table again."""


class IntegrityError(CustodyError):
    """Stored state contradicts itself: counts that do not add up, a broken ledger chain."""


class TransientError(CustodyError):
    """A failure worth retrying: I/O hiccups, a busy database, a lost executor."""

    retryable = True


class SourceUnavailable(TransientError):
    """A database source that cannot be reached now."""


class ObjectStoreUnavailable(TransientError):
    """The lake's object store could not be reached, or did not answer in time."""


class ServiceUnavailable(TransientError):
    """The Custody service (CUSTODY_URL) could not be reached, or failed to answer."""


class SettingsChanged(TransientError):
    """An admin changed the policy settings a decision was made under before it was recorded."""


class LanderLost(TransientError):
    """The resident lander stopped before it answered a landing's request."""


class LanderBusy(TransientError):
    """The resident lander has as many requests as it answers at once."""


class CatalogUnavailable(TransientError):
    """The catalog's database cannot be reached, or stayed busy past the timeout."""


class CommitUnknown(CatalogUnavailable):
    """The catalog's database was lost while it committed a transaction: whether it did is unknown
    until it can be read again. Never retried: a step run again on a commit that happened would make
    a second version of the same work."""

    retryable = False


class TransactionLost(CatalogUnavailable):
    """A savepoint could not be rolled back to: the database ended the whole transaction (a full
    disk, an I/O error), and nothing more may be written in it."""


class NotJoinedTogether(CustodyError):
    """Several reports' events could not be kept and joined at once (one of them fails to join, or
    the database refused a statement): each report is to be taken on its own."""


class RemoteFailure(CustodyError):
    """A Custody error another process raised and reported (the resident lander's): its kind, and
    whether it may be retried, as that process said."""

    def __init__(self, message: str, *, kind: str, retryable: bool, exit_code: int) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable
        self.exit_code = exit_code
