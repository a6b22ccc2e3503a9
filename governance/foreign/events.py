"""OpenLineage run events as the service receives them: a JSON body of one event or a list of them,
each held against the specification's JSON Schema (the copy in `openlineage-spec/`, never fetched),
its facets against the schemas their `_schemaURL` names where the copy has them."""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from governance.errors import InvalidInput, shown

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator, FormatChecker
    from jsonschema.exceptions import ValidationError
    from jsonschema_rs import Validator
    from referencing import Registry

SPEC = Path(__file__).resolve().parent / "openlineage-spec"
EVENT_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json"
RUN_EVENT = f"{EVENT_SCHEMA}#/$defs/RunEvent"
STATIC_EVENTS = {"dataset": f"{EVENT_SCHEMA}#/$defs/DatasetEvent", "job": f"{EVENT_SCHEMA}#/$defs/JobEvent"}
# The most events one request may carry, and the most characters a namespace or name may have.
MAX_EVENTS = 1_000
MAX_NAME = 4_096
MAX_FIELD_DEPENDENCIES = 10_000
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Python's datetime takes at most microseconds; Java's clients may send nanoseconds.
FRACTION = re.compile(r"(\.\d{6})\d+")
# The formats held as rules, not only as the annotations JSON Schema 2020-12 makes of them: a run is
# known by its id and ordered by its times. Others stay annotations: OpenLineage's own Spark listener
# names a local data source's `uri` "file", which is no absolute URI.
ASSERTED_FORMATS = ("uuid", "date-time")
# Facets Custody joins on, on the datasets a run wrote, are held to their core schema whatever schema they name.
READ_FACETS = {
    "columnLineage": "https://openlineage.io/spec/facets/1-2-0/ColumnLineageDatasetFacet.json#/$defs/ColumnLineageDatasetFacet"
}


@dataclass(frozen=True)
class RunEvent:
    """One valid run event: what Custody joins on, and the event itself, to keep as received."""

    run_id: str
    event_type: str
    # The event's time as one instant is always written (see `instant`), whatever form it came in.
    event_time: str
    job_namespace: str
    job_name: str
    producer: str
    body: Mapping[str, Any]

    @property
    def inputs(self) -> list[Mapping[str, Any]]:
        return list(self.body.get("inputs") or ())

    @property
    def outputs(self) -> list[Mapping[str, Any]]:
        return list(self.body.get("outputs") or ())

    @property
    def run_facets(self) -> Mapping[str, Any]:
        return self.body["run"].get("facets") or {}

    @property
    def job_facets(self) -> Mapping[str, Any]:
        return self.body["job"].get("facets") or {}


@dataclass(frozen=True)
class StaticEvent:
    """One valid DatasetEvent or JobEvent: what a dataset or a job is, said apart from any run
    (OpenLineage's static lineage): its kind (`dataset` or `job`), namespace and name, and the
    event itself, to keep as received."""

    kind: str
    namespace: str
    name: str
    event_time: str
    producer: str
    body: Mapping[str, Any]


# What a request's body may hold.
Event = RunEvent | StaticEvent


def decoded(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body as sent, or inflated when it came gzip- or deflate-encoded, refused past `limit` bytes
    inflated: a small compressed body must not stand for a huge one."""
    if not encoding or encoding.strip().lower() == "identity":
        return body
    kind = encoding.strip().lower()
    if kind not in ("gzip", "deflate"):
        raise InvalidInput(f"Content-Encoding '{shown(encoding)}': send the events as they are, gzip or deflate")
    inflater = zlib.decompressobj(wbits=47 if kind == "gzip" else 15)
    try:
        inflated = inflater.decompress(body, limit + 1)
    except zlib.error as err:
        raise InvalidInput(f"the body is not {kind} data: {err}") from err
    if len(inflated) > limit or inflater.unconsumed_tail:
        raise InvalidInput(f"the events, inflated, are larger than the {limit // 1024 // 1024} MiB a request may send")
    return inflated


def parse(body: bytes) -> list[Event]:
    """The events of a request's body (run events, and dataset and job events), each valid;
    InvalidInput names the first problem, and which event of a list it is in."""
    try:
        return _events(_json(body))
    except RecursionError as err:  # from the decoder, or the reference validator
        raise InvalidInput("the body nests its JSON too deeply to be OpenLineage events") from err


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InvalidInput(f"the body is not JSON: {err}") from err


def _events(given: Any) -> list[Event]:
    if isinstance(given, dict):
        return [_checked(given, "the event")]
    if not isinstance(given, list) or not given:
        raise InvalidInput("send one OpenLineage event (a JSON object) or a list of them")
    if len(given) > MAX_EVENTS:
        raise InvalidInput(f"a request may carry at most {MAX_EVENTS:,} events; this one has {len(given):,}")
    return [_checked(event, f"event {i} of the list") for i, event in enumerate(given)]


def _checked(event: Any, which: str) -> Event:
    if not isinstance(event, dict):
        raise InvalidInput(f"{which}: not a JSON object")
    if "run" not in event:
        return _static(event, which)
    _valid(event, RUN_EVENT, which, "")
    _valid_facets(event, which, ("run", "job"))
    job, run = event["job"], event["run"]
    _valid_names(event, which, "job")
    return RunEvent(
        run_id=str(run["runId"]).lower(),
        event_type=event.get("eventType") or "OTHER",
        event_time=instant(event["eventTime"]),
        job_namespace=job["namespace"],
        job_name=job["name"],
        producer=event["producer"],
        body=event,
    )


def _static(event: dict[str, Any], which: str) -> StaticEvent:
    kind = "dataset" if "dataset" in event else "job" if "job" in event else None
    if kind is None:
        raise InvalidInput(f"{which} is no OpenLineage event: it has no run, no job and no dataset")
    _valid(event, STATIC_EVENTS[kind], which, "")
    _valid_facets(event, which, (kind,))
    _valid_names(event, which, kind)
    named = event[kind]
    return StaticEvent(
        kind, named["namespace"], named["name"], instant(event["eventTime"]), event["producer"], body=event
    )


def _valid_facets(event: Mapping[str, Any], which: str, kinds: tuple[str, ...]) -> None:
    for where, facets in _facets(event, kinds):
        for name, facet in facets.items():
            _valid_facet(facet, which, f"{where}.{name}")
            # Custody reads them where the join does: on the datasets a run wrote.
            written = where.startswith("outputs[") and where.endswith(".facets")
            read = name in READ_FACETS and written and isinstance(facet, Mapping)
            if read and not facet.get("_deleted"):
                _valid(facet, READ_FACETS[name], which, f"{where}.{name}")
                _bounded_lineage(facet, which, f"{where}.{name}")


def _valid_names(event: Mapping[str, Any], which: str, kind: str) -> None:
    for where, value in _names(event, kind):
        if len(value) > MAX_NAME:
            raise InvalidInput(f"{which}: {where} is longer than {MAX_NAME:,} characters")
        if CONTROL.search(value):
            raise InvalidInput(f"{which}: {where} '{shown(value, 80)}' holds a control character")


def moment(value: str) -> datetime:
    """The instant an RFC 3339 time names (to the microsecond), in UTC."""
    found = datetime.fromisoformat(FRACTION.sub(r"\1", value))
    return (found if found.tzinfo else found.replace(tzinfo=UTC)).astimezone(UTC)


def instant(value: str) -> str:
    """The time as Custody keeps it, one text for one instant: `2026-11-27T05:00:00Z` for
    `…05:00:00.000+00:00` and `…07:00:00+02:00` alike, a fraction of a second kept to the microsecond."""
    found = moment(value)
    fraction = f"{found.microsecond:06d}".rstrip("0")
    return found.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def _bounded_lineage(facet: Mapping[str, Any], which: str, where: str) -> None:
    """A column lineage facet names at most MAX_FIELD_DEPENDENCIES input fields, all columns together:
    each is a row the join keeps."""
    count = sum(len(spec["inputFields"]) for spec in facet["fields"].values()) + len(facet.get("dataset") or ())
    if count > MAX_FIELD_DEPENDENCIES:
        raise InvalidInput(
            f"{which}: {where} names {count:,} input fields; at most {MAX_FIELD_DEPENDENCIES:,} are kept for one dataset"
        )


def _names(event: Mapping[str, Any], kind: str) -> Iterator[tuple[str, str]]:
    """The names in an event whose own is its `kind`'s (`job` or `dataset`): the schema held them to
    be text there, whatever other fields the event carries beside them."""
    yield f"{kind}.namespace", event[kind]["namespace"]
    yield f"{kind}.name", event[kind]["name"]
    for side in ("inputs", "outputs"):
        for i, dataset in enumerate(event.get(side) or ()):
            yield f"{side}[{i}].namespace", dataset["namespace"]
            yield f"{side}[{i}].name", dataset["name"]


def _facets(event: Mapping[str, Any], kinds: tuple[str, ...]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Where facets sit in an event: its own `kinds`' (a run event's run and job, a job event's job,
    a dataset event's dataset), and each input's and output's own and side's."""
    for kind in kinds:
        yield f"{kind}.facets", event[kind].get("facets") or {}
    # Inputs and outputs are a job's: the schema holds them to be datasets there, and nowhere else.
    sides = (("inputs", "inputFacets"), ("outputs", "outputFacets")) if "job" in kinds else ()
    for side, own in sides:
        for i, dataset in enumerate(event.get(side) or ()):
            yield f"{side}[{i}].facets", dataset.get("facets") or {}
            yield f"{side}[{i}].{own}", dataset.get(own) or {}


def _valid_facet(facet: Mapping[str, Any], which: str, where: str) -> None:
    """A facet names its schema with an http(s) URL; one the copy holds must be met, and one it does
    not hold (a producer's own facet) is only held to the base facet's rules, already checked."""
    url = facet.get("_schemaURL") if isinstance(facet, Mapping) else None
    if not isinstance(url, str):
        return  # a deleted facet ({"_deleted": true}) names none
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInput(
            f"{which}: {where}._schemaURL '{shown(url, 120)}' is not an http(s) URL: a facet names its "
            "schema where anyone may read it, and Custody never fetches it"
        )
    base = url.partition("#")[0]
    if base in _known():
        _valid(dict(facet), url, which, where)


def _valid(instance: Mapping[str, Any], url: str, which: str, at: str) -> None:
    """`instance`, found at `at` in the event, against the schema `url` names. A native validator
    passes it first; it asserts more formats than Custody does, so what it refuses is held to the
    reference validator, which names the problem, or finds none."""
    from jsonschema.exceptions import best_match
    from referencing.exceptions import Unresolvable

    native = _native(url)
    if native is not None and native.is_valid(instance):
        return
    try:
        error = best_match(_validator(url).iter_errors(instance))
    except Unresolvable as err:
        raise InvalidInput(f"{which}: {at}._schemaURL '{shown(url, 120)}' names no schema: {err}") from err
    if error is not None:
        where = _path(at, error)
        raise InvalidInput(f"{which}: {where + ': ' if where else ''}{shown(error.message, 300)}")


def _path(at: str, error: ValidationError) -> str:
    """Where the error is, as a reader of the event names it: `run.runId`, `inputs[0].name`."""
    where = at
    for part in error.absolute_path:
        where += f"[{part}]" if isinstance(part, int) else f".{part}" if where else str(part)
    return where


@cache
def _schemas() -> tuple[Mapping[str, Any], ...]:
    return tuple(json.loads(path.read_text()) for path in sorted(SPEC.rglob("*.json")))


@cache
def _known() -> frozenset[str]:
    return frozenset(schema["$id"] for schema in _schemas())


@cache
def _registry() -> Registry:
    from referencing import Registry, Resource

    return Registry().with_resources((schema["$id"], Resource.from_contents(schema)) for schema in _schemas())


@cache
def _native(url: str) -> Validator | None:
    """The native validator of the schema `url` names, its asserted formats checked as the reference
    validator checks them; None for a schema it cannot build, which the reference validator reports."""
    import jsonschema_rs

    reference = _format_checker()
    formats: dict[str, Callable[..., bool]] = {
        name: partial(reference.conforms, format=name) for name in ASSERTED_FORMATS
    }
    registry = jsonschema_rs.Registry([(schema["$id"], dict(schema)) for schema in _schemas()])
    try:
        return jsonschema_rs.validator_for({"$ref": url}, registry=registry, validate_formats=True, formats=formats)
    except (jsonschema_rs.ReferencingError, jsonschema_rs.ValidationError):
        return None


@cache
def _format_checker() -> FormatChecker:
    from jsonschema import FormatChecker

    return FormatChecker(formats=ASSERTED_FORMATS)


@cache
def _validator(url: str) -> Draft202012Validator:
    # Imported here, not with the module: jsonschema's format checkers take a second to import,
    # which every `custody` command would pay for, and only the service validates events.
    from jsonschema import Draft202012Validator

    return Draft202012Validator({"$ref": url}, registry=_registry(), format_checker=_format_checker())
