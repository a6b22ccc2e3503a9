"""The checks Custody makes of every version, by name: what the code location declares for each asset
without loading the catalog; `governance.audit` makes them."""

from __future__ import annotations

from enum import StrEnum

from governance.spec import Spec


class Check(StrEnum):
    ROWS_ADD_UP = "rows_add_up"
    QUARANTINE_WITHIN_LIMIT = "quarantine_within_limit"
    SCHEMA_MATCHES_SPEC = "schema_matches_spec"
    INPUTS_AS_DECLARED = "inputs_as_declared"
    FILES_INTACT = "files_intact"
    STREAM_CONTIGUOUS = "stream_contiguous"


DESCRIPTIONS = {
    Check.ROWS_ADD_UP: "Rows read from the batch = rows landed + rows quarantined.",
    Check.QUARANTINE_WITHIN_LIMIT: "Rows quarantined are within the spec's max_bad_fraction of the rows read.",
    Check.SCHEMA_MATCHES_SPEC: "The columns written, with their types, are the spec's columns.",
    Check.INPUTS_AS_DECLARED: "The input versions the version was made from are the spec's declared inputs.",
    Check.STREAM_CONTIGUOUS: "The version's offsets start where the version before ended in every partition: "
    "Kafka deleted none before they were landed.",
    Check.FILES_INTACT: "Every file of the version's manifest is on disk with its size; run on demand, with its sha256 "
    "too: an audit of the newest version, or of the one the run config names.",
}


def checks_for(spec: Spec) -> tuple[Check, ...]:
    schema = (Check.SCHEMA_MATCHES_SPEC,) if spec.body.columns else ()
    if spec.is_landing:
        stream = (Check.STREAM_CONTIGUOUS,) if spec.reads_topic else ()
        return Check.ROWS_ADD_UP, Check.QUARANTINE_WITHIN_LIMIT, *schema, *stream, Check.FILES_INTACT
    return *schema, Check.INPUTS_AS_DECLARED, Check.FILES_INTACT
