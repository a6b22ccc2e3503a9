"""Where a database source lives, named as OpenLineage names datasets."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from governance.errors import InvalidInput
from governance.spec import JdbcSource

URL = re.compile(r"jdbc:postgresql://(?P<host>[^/:?]+)(?::(?P<port>[0-9]+))?/(?P<database>[^?]+)")


@dataclass(frozen=True)
class Place:
    """Where a source lives, named as OpenLineage names datasets: `postgres://host:port`, and
    `database.schema.table` (a query: `database.query_<hash of its text>`)."""

    url: str
    namespace: str
    name: str

    @classmethod
    def of(cls, source: JdbcSource) -> Place:
        found = URL.match(source.url)
        if found is None:  # the spec's pattern admits only URLs this matches
            raise InvalidInput(f"{source.url}: not a PostgreSQL JDBC URL")
        database = found["database"]
        table = source.table or "query_" + hashlib.sha256(source.statement.encode()).hexdigest()[:12]
        return cls(source.url, f"postgres://{found['host']}:{found['port'] or 5432}", f"{database}.{table}")
