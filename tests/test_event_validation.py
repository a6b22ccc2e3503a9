"""OpenLineage events are validated natively first: what the native validator passes, the reference
validator (Python's jsonschema, with the formats Custody asserts) passes too, so an event is refused
exactly when the reference refuses it."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from governance.errors import InvalidInput
from governance.foreign import events
from governance.foreign.events import RUN_EVENT, parse

COLUMN_LINEAGE = (
    "https://openlineage.io/spec/facets/1-2-0/ColumnLineageDatasetFacet.json#/$defs/ColumnLineageDatasetFacet"
)
VERSION = "https://openlineage.io/spec/facets/1-0-1/DatasetVersionDatasetFacet.json#/$defs/DatasetVersionDatasetFacet"
PRODUCER = "https://example.com/reports"
VALID: dict[str, Any] = {
    "eventType": "COMPLETE",
    "eventTime": "2026-11-27T05:00:00.123456789Z",
    "producer": PRODUCER,
    "schemaURL": RUN_EVENT,
    "run": {"runId": "0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b"},
    "job": {"namespace": "airflow://reports", "name": "daily"},
    "inputs": [
        {
            "namespace": "file",
            "name": "/lake/landing/sales/clients/v=3",
            "facets": {"version": {"_producer": PRODUCER, "_schemaURL": VERSION, "datasetVersion": "3"}},
        }
    ],
    "outputs": [
        {
            "namespace": "postgres://warehouse:5432",
            "name": "marts.public.clients",
            "facets": {
                "columnLineage": {
                    "_producer": PRODUCER,
                    "_schemaURL": COLUMN_LINEAGE,
                    "fields": {
                        "id": {
                            "inputFields": [
                                {"namespace": "file", "name": "/lake/landing/sales/clients/v=3", "field": "id"}
                            ]
                        }
                    },
                }
            },
        }
    ],
}


def changed(path: str, value: Any) -> dict[str, Any]:
    """The valid event with the value at `path` (dotted, list indices as numbers) replaced; `...` removes it."""
    event = copy.deepcopy(VALID)
    *parents, last = [int(part) if part.isdigit() else part for part in path.split(".")]
    holder = event
    for part in parents:
        holder = holder[part]
    if value is ...:
        del holder[last]
    else:
        holder[last] = value
    return event


CANDIDATES = [
    VALID,
    changed("run.runId", "0193A1B2-7C3D-7E4F-8A9B-0C1D2E3F4A5B"),
    changed("run.runId", "{0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b}"),
    changed("run.runId", "0193a1b27c3d7e4f8a9b0c1d2e3f4a5b"),
    changed("run.runId", "urn:uuid:0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b"),
    changed("run.runId", "0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5g"),
    changed("eventTime", "2026-11-27T05:00:00+02:00"),
    changed("eventTime", "2026-11-27T05:00:00"),
    changed("eventTime", "2026-11-27 05:00:00Z"),
    changed("eventTime", "2026-02-30T05:00:00Z"),
    changed("eventTime", "yesterday"),
    changed("eventTime", "2026-12-31T23:59:60Z"),
    changed("eventTime", "0000-01-01T00:00:00Z"),
    changed("eventType", "STARTED"),
    changed("producer", 7),
    changed("producer", "not a uri"),
    changed("schemaURL", ...),
    changed("job.name", ...),
    changed("inputs.0.facets.version.datasetVersion", 3),
    changed("inputs.0.facets.version._producer", ...),
    changed("outputs.0.facets.columnLineage.fields.id.inputFields.0.field", None),
    changed("outputs.0.facets.columnLineage.fields.id.inputFields", "id"),
    changed("outputs.0.facets.columnLineage.fields", []),
    changed("outputs.0", {"namespace": "postgres://warehouse:5432"}),
]


def checked(event: dict[str, Any]) -> list[tuple[Any, str]]:
    """What is held to which schema: the event to the run event's, each dataset facet to its own."""
    facets = [
        (facet, facet["_schemaURL"])
        for side in ("inputs", "outputs")
        for dataset in event.get(side, [])
        if isinstance(dataset, dict)
        for facet in (dataset.get("facets") or {}).values()
    ]
    return [(event, RUN_EVENT), *facets]


def reference_passes(instance: Any, url: str) -> bool:
    return not list(events._validator(url).iter_errors(instance))


@pytest.mark.parametrize("event", CANDIDATES, ids=range(len(CANDIDATES)))
def test_what_the_native_validator_passes_the_reference_validator_passes_too(event):
    for instance, url in checked(event):
        native = events._native(url)
        assert native is not None
        assert reference_passes(instance, url) or not native.is_valid(instance)


@pytest.mark.parametrize("event", CANDIDATES, ids=range(len(CANDIDATES)))
def test_an_event_is_refused_exactly_when_the_reference_validator_refuses_it(event):
    if all(reference_passes(instance, url) for instance, url in checked(event)):
        assert parse(json.dumps(event).encode())
    else:
        with pytest.raises(InvalidInput):
            parse(json.dumps(event).encode())
