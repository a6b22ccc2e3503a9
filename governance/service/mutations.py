"""What a GraphQL request to Dagster's webserver asks it to change, read by the gate before the
webserver reads it.

Dagster's webserver decides nothing by itself: whoever reaches it may start or stop a sensor, and the
backfills it makes are launched later by the daemon, with no request to say who asked. So the gate
reads each GraphQL request as the webserver would (where the query is, with the same parser), passes
on its own reading alone, as a JSON body it wrote, and decides by the fields the request's mutations
ask for:

- a run's launch or re-execution: any signed-in user; Custody's run coordinator decides the run;
- a backfill's launch or re-execution: any signed-in user; the webserver's answer names the backfill,
  which the gate records as that user's (the request is made to ask for its id, under a name the
  client cannot know), and the coordinator decides each of its runs for them;
- a run's termination, a backfill's cancellation or resumption: whoever the run or backfill is for,
  or an admin; a resumed backfill stays its launcher's;
- what changes nothing that runs or is kept (telemetry, a reload of the code location): anyone;
- everything else (sensors and schedules and their dry runs, automation, concurrency, runs' and
  assets' records): a verified admin.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    OperationType,
    SelectionNode,
    SelectionSetNode,
    parse,
    print_ast,
    value_from_ast_untyped,
)

from governance.errors import InvalidInput

LAUNCHES = frozenset(
    {"launchRun", "launchMultipleRuns", "launchPipelineExecution", "launchRunReexecution", "launchPipelineReexecution"}
)
# The mutations that make a backfill: its id comes in a LaunchBackfillSuccess.
BACKFILLS = frozenset({"launchPartitionBackfill", "reexecutePartitionBackfill"})
# Each mutation that stops or resumes what runs, and the argument naming the runs or the backfill.
STOPS: Mapping[str, str] = {
    "terminateRun": "runId",
    "terminatePipelineExecution": "runId",
    "terminateRuns": "runIds",
    "cancelPartitionBackfill": "backfillId",
    "resumePartitionBackfill": "backfillId",
}
HARMLESS = frozenset({"logTelemetry", "setNuxSeen", "reloadRepositoryLocation", "reloadWorkspace"})


@dataclass(frozen=True)
class Asked:
    """A mutation's field: its name, the key its answer comes under, and its arguments."""

    name: str
    key: str
    arguments: Mapping[str, Any]

    def argument(self, name: str) -> str:
        """An argument's value, as the ledger shows it."""
        return json.dumps(self.arguments.get(name), default=str)[:200]


@dataclass(frozen=True)
class GraphQLRequest:
    """A GraphQL request as the gate read it: the JSON body it passes on, what its mutations ask, and
    the name under which the answer names the backfills they make."""

    body: bytes
    asked: tuple[Asked, ...]
    backfill_id: str = ""

    @property
    def backfills(self) -> tuple[Asked, ...]:
        return tuple(asked for asked in self.asked if asked.name in BACKFILLS)

    @property
    def controls(self) -> tuple[Asked, ...]:
        """What only a verified admin may ask."""
        open_to_all = LAUNCHES | BACKFILLS | STOPS.keys() | HARMLESS
        return tuple(asked for asked in self.asked if asked.name not in open_to_all)

    @property
    def stops(self) -> tuple[Asked, ...]:
        return tuple(asked for asked in self.asked if asked.name in STOPS)


def read(content_type: str, body: bytes, query_string: str) -> GraphQLRequest:
    """The request as Dagster's webserver reads a POST to its GraphQL endpoint: a JSON body, a
    body of GraphQL, or else the query string. InvalidInput for one it would refuse."""
    if "application/json" in content_type:
        try:
            data = json.loads(body)
        except ValueError as err:
            raise InvalidInput(f"the GraphQL request is not JSON: {err}") from err
        if not isinstance(data, dict):
            raise InvalidInput("the GraphQL request is not one JSON object")
    elif "application/graphql" in content_type:
        data = {"query": body.decode("utf-8", errors="replace")}
    else:
        data = {name: values[-1] for name, values in parse_qs(query_string).items()}
    query, variables, operation = data.get("query"), data.get("variables"), data.get("operationName")
    if not isinstance(query, str):
        raise InvalidInput("the GraphQL request holds no query")
    if isinstance(variables, str):
        try:
            variables = json.loads(variables)
        except ValueError as err:
            raise InvalidInput(f"the GraphQL request's variables are not JSON: {err}") from err
    if variables is not None and not isinstance(variables, dict):
        raise InvalidInput("the GraphQL request's variables are not one JSON object")
    if operation is not None and not isinstance(operation, str):
        raise InvalidInput("the GraphQL request's operationName is not a string")
    return _read_query(query, variables or {}, operation)


def _read_query(query: str, variables: dict[str, Any], operation: str | None) -> GraphQLRequest:
    try:
        document = parse(query)
    except GraphQLError as err:  # a webserver parsing otherwise must not run what the gate did not read
        raise InvalidInput(f"the GraphQL request's query does not parse: {err.message}") from err
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    alias = f"custody_{secrets.token_hex(8)}"
    asked: list[Asked] = []
    for definition in document.definitions:
        if isinstance(definition, OperationDefinitionNode) and definition.operation is OperationType.MUTATION:
            fields = list(_root_fields(definition.selection_set, fragments, set()))
            asked.extend(_asked(field, variables) for field in fields)
            for field in fields:
                if field.name.value in BACKFILLS:
                    _ask_for_backfill_id(field, alias)
    # The query as it came, but where the gate asked for more: what the webserver runs is what was read.
    if not any(field.name in BACKFILLS for field in asked):
        return GraphQLRequest(_body(query, variables, operation), tuple(asked))
    return GraphQLRequest(_body(print_ast(document), variables, operation), tuple(asked), alias)


def _body(query: str, variables: dict[str, Any], operation: str | None) -> bytes:
    return json.dumps({"query": query, "variables": variables, "operationName": operation}).encode()


def _root_fields(
    selections: SelectionSetNode, fragments: Mapping[str, FragmentDefinitionNode], seen: set[str]
) -> Sequence[FieldNode]:
    """The fields a mutation asks at its root, those of its fragments included (each fragment once)."""
    found: list[FieldNode] = []
    for selection in selections.selections:
        if isinstance(selection, FieldNode):
            found.append(selection)
        elif isinstance(selection, InlineFragmentNode):
            found.extend(_root_fields(selection.selection_set, fragments, seen))
        elif isinstance(selection, FragmentSpreadNode) and selection.name.value not in seen:
            seen.add(selection.name.value)
            fragment = fragments.get(selection.name.value)
            if fragment is not None:
                found.extend(_root_fields(fragment.selection_set, fragments, seen))
    return found


def _asked(field: FieldNode, variables: dict[str, Any]) -> Asked:
    arguments = {argument.name.value: value_from_ast_untyped(argument.value, variables) for argument in field.arguments}
    return Asked(field.name.value, (field.alias or field.name).value, arguments)


def _ask_for_backfill_id(field: FieldNode, alias: str) -> None:
    """Add to a backfill mutation's selection the id of the backfill it made, under `alias`."""
    [operation] = parse(f"{{ ... on LaunchBackfillSuccess {{ {alias}: backfillId }} }}").definitions
    assert isinstance(operation, OperationDefinitionNode)
    added: tuple[SelectionNode, ...] = tuple(operation.selection_set.selections)
    if field.selection_set is None:
        field.selection_set = SelectionSetNode(selections=added)
    else:
        field.selection_set = SelectionSetNode(selections=(*field.selection_set.selections, *added))


def backfill_ids(answer: bytes, request: GraphQLRequest) -> dict[str, str]:
    """The backfill each of the request's backfill mutations made, by its answer's key, as the
    webserver's answer names it under the request's alias: none for a mutation that failed."""
    try:
        data = json.loads(answer).get("data") or {}
    except (ValueError, AttributeError):
        return {}
    found = {}
    for field in request.backfills:
        result = data.get(field.key) if isinstance(data, dict) else None
        backfill = result.get(request.backfill_id) if isinstance(result, dict) and request.backfill_id else None
        if isinstance(backfill, str) and backfill:
            found[field.key] = backfill
    return found
