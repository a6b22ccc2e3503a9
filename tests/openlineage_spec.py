"""OpenLineage events held against the specification's JSON Schema, from the copy the service validates with.

Each event is validated against the RunEvent of `OpenLineage.json`, and each facet against the
schema its `_schemaURL` names. Every `$ref` resolves in a local registry: nothing is fetched, and a
URL with no schema here fails the test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable

SPEC = Path(__file__).resolve().parent.parent / "governance" / "foreign" / "openlineage-spec"
EVENT_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json"
RUN_EVENT = f"{EVENT_SCHEMA}#/$defs/RunEvent"


@cache
def registry() -> Registry:
    schemas = [json.loads(path.read_text()) for path in sorted(SPEC.rglob("*.json"))]
    return Registry().with_resources((schema["$id"], Resource.from_contents(schema)) for schema in schemas)


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events of a file transport, each one validated."""
    events = [json.loads(line) for line in path.read_text().splitlines()]
    for event in events:
        validate_event(event)
    return events


def validate_event(event: dict[str, Any]) -> None:
    """Fail, naming every violation, when the event or one of its facets breaks its schema."""
    assert event.get("schemaURL") == RUN_EVENT, f"event: schemaURL {event.get('schemaURL')!r} is not {RUN_EVENT}"
    _validate(event, RUN_EVENT, "event")
    for where, kind, facets in _facet_groups(event):
        for name, facet in facets.items():
            url = facet.get("_schemaURL")
            schema = _schema(url, f"{where}.{name}")
            extends = [part["$ref"] for part in schema.get("allOf", []) if "$ref" in part]
            assert f"{EVENT_SCHEMA}#/$defs/{kind}" in extends, f"{where}.{name}: {url} does not extend {kind}"
            _validate(facet, url, f"{where}.{name}")


def _facet_groups(event: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Where facets sit in an event, and the kind of facet each place takes."""
    yield "run.facets", "RunFacet", event.get("run", {}).get("facets", {})
    yield "job.facets", "JobFacet", event.get("job", {}).get("facets", {})
    for side, own, kind in (
        ("inputs", "inputFacets", "InputDatasetFacet"),
        ("outputs", "outputFacets", "OutputDatasetFacet"),
    ):
        for i, dataset in enumerate(event.get(side, [])):
            yield f"{side}[{i}].facets", "DatasetFacet", dataset.get("facets", {})
            yield f"{side}[{i}].{own}", kind, dataset.get(own, {})


def _schema(url: str | None, where: str) -> dict[str, Any]:
    try:
        return registry().resolver().lookup(url or "").contents
    except Unresolvable as missing:
        raise AssertionError(f"{where}: schema URL {url!r} names no schema in {SPEC}") from missing


def _validate(instance: dict[str, Any], url: str, where: str) -> None:
    validator = Draft202012Validator(
        {"$ref": url}, registry=registry(), format_checker=Draft202012Validator.FORMAT_CHECKER
    )
    errors = [f"{where} at {error.json_path}: {error.message}" for error in validator.iter_errors(instance)]
    assert not errors, "\n".join(errors)
