"""Launch asset runs on Custody's Dagster instance, as the UI does, and follow their progress."""

from __future__ import annotations

import os
import re
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import yaml
from sqlalchemy.exc import DBAPIError

from assets.console import executed_here, step_failure_message
from assets.coordinator import admitted
from assets.dagster_internals import AssetGraph
from assets.definitions import definitions_for
from assets.factory import PARTITION_FORMAT, REQUESTED_BY_TAG
from assets.origin import plan_run
from assets.runs import fail_runs_of_gone_processes, held_for_run
from assets.tags import PARTITION_NAME_TAG
from governance.config import Settings
from governance.errors import (
    EnvironmentProblem,
    InvalidInput,
    InvalidName,
    NotFound,
    SpecError,
    SpecProblem,
    error_summary,
)
from governance.locks import file_lock
from governance.runs import RunOutcome, StepFailure
from governance.spec import SpecSet, load_upstream, load_valid_specs
from governance.zones import AssetKey

INSTANCE_YAML = Path(__file__).with_name("dagster.yaml")
# What homes were given before assets/dagster.yaml said what it says now: replaced, as nobody chose it.
EARLIER_INSTANCE_YAMLS = (
    "telemetry:\n  enabled: false\n",
    (
        "# Custody's Dagster instance, written to $CUSTODY_HOME/dagster/dagster.yaml when missing; `make ui`\n"
        '# and the custody CLI share it. Edit the copy there: the README\'s "The Dagster UI" says what it decides.\n'
        "telemetry:\n  enabled: false\nrun_coordinator:\n  module: assets.coordinator\n  class: CustodyRunCoordinator\n"
        "  config:\n    max_concurrent_runs: 10\n    dequeue_interval_seconds: 1\n"
    ),
    (
        "# Custody's Dagster instance, written to $CUSTODY_HOME/dagster/dagster.yaml when missing; `make ui`\n"
        '# and the custody CLI share it. Edit the copy there: the README\'s "The Dagster UI" says what it decides.\n'
        "telemetry:\n  enabled: false\nrun_coordinator:\n  module: assets.coordinator\n  class: CustodyRunCoordinator\n"
        "  config:\n    max_concurrent_runs: 10\n    dequeue_interval_seconds: 1\n"
        "# One line on the console for each run that fails; Dagster's own lines only with CUSTODY_VERBOSE=1.\n"
        "python_logs:\n  dagster_handler_config:\n    handlers:\n      custody_console:\n"
        "        class: assets.console.RunConsole\n"
    ),
    (
        "# Custody's Dagster instance, written to $CUSTODY_HOME/dagster/dagster.yaml when missing; `make ui`\n"
        '# and the custody CLI share it. Edit the copy there: the README\'s "The Dagster UI" says what it decides.\n'
        "telemetry:\n  enabled: false\n"
        "# Sensors and schedules start, stop or reset only as Custody's UI decided it, for an admin.\n"
        "instance_class:\n  module: assets.instance\n  class: CustodyInstance\n"
        "run_coordinator:\n  module: assets.coordinator\n  class: CustodyRunCoordinator\n"
        "  config:\n    max_concurrent_runs: 10\n    dequeue_interval_seconds: 1\n"
        "# One line on the console for each run that fails; Dagster's own lines only with CUSTODY_VERBOSE=1.\n"
        "python_logs:\n  dagster_handler_config:\n    handlers:\n      custody_console:\n"
        "        class: assets.console.RunConsole\n"
    ),
)
# Dagster's own console lines only with --verbose: a failure's one clean message is the CLI's.
QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
VERBOSE_CONSOLE = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
POLL_SECONDS = 0.5
# How Dagster's engine says a step waits for a slot of its pool (it repeats it, with "still").
BLOCKED_BY_POOL = "Step blocked by limit for pool"
# Made once the instance's storage exists; until then its first opener holds CREATING_LOCK.
CREATED = ".custody-created"
CREATING_LOCK = ".custody-creating.lock"
PSYCOPG2 = "postgresql+psycopg2"


def require_psycopg2(config: Path) -> None:
    """Dagster's PostgreSQL storage speaks psycopg2 only, and SQLAlchemy 2.1 takes a bare
    postgresql:// for psycopg 3: such an instance would start, then fail at its first NOTIFY with a
    driver's traceback. Say so before anything runs."""
    if not config.exists():
        return
    try:
        storage = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("storage") or {}
        postgres = storage.get("postgres")
    except (yaml.YAMLError, AttributeError) as err:
        raise InvalidInput(f"{config}: not a Dagster instance's settings: {err}") from err
    if not isinstance(postgres, dict):
        return
    if "postgres_url" in postgres:
        scheme = _resolved(postgres["postgres_url"]).partition("://")[0]
    else:
        scheme = _resolved((postgres.get("postgres_db") or {}).get("scheme")) or "postgresql"
    if scheme != PSYCOPG2:
        raise InvalidInput(
            f"{config}: storage.postgres names {scheme}://, but Dagster's PostgreSQL storage runs on "
            f"psycopg2 only: write {PSYCOPG2}:// in postgres_url, or scheme: {PSYCOPG2} under "
            "postgres_db, as deploy/dagster.yaml does"
        )


def _resolved(value: object) -> str:
    """A setting as Dagster reads it: given, or from the environment variable `{env: NAME}` names."""
    if isinstance(value, dict):
        return os.environ.get(str(value.get("env")), "")
    return str(value or "")


def instance_for(settings: Settings) -> dg.DagsterInstance:
    """The Dagster instance in DAGSTER_HOME (else under CUSTODY_HOME) that `make ui` shows too.
    The first process to open it writes its settings and creates its storage while the others
    wait: commands started at once on a fresh home would otherwise create the same tables together."""
    home = settings.dagster_home
    config = home / "dagster.yaml"
    require_psycopg2(config)
    if (home / CREATED).exists() and not _unchosen(config):
        return dg.DagsterInstance.from_config(str(home))
    with file_lock(home / CREATING_LOCK):
        if not config.exists() or _unchosen(config):
            temporary = config.with_name(config.name + ".tmp")
            temporary.write_text(INSTANCE_YAML.read_text(encoding="utf-8"), encoding="utf-8")
            os.replace(temporary, config)  # the webserver or daemon may be reading it
        instance = dg.DagsterInstance.from_config(str(home))
        (home / CREATED).touch()
        return instance


def _unchosen(config: Path) -> bool:
    return config.exists() and config.read_text(encoding="utf-8") in EARLIER_INSTANCE_YAMLS


if __name__ == "__main__":
    instance_for(Settings.from_env())


def asset_key(key: AssetKey) -> dg.AssetKey:
    return dg.AssetKey([key.domain, key.name])


def resolve_selection(graph: AssetGraph, selection: str) -> list[dg.AssetKey]:
    try:
        keys = dg.AssetSelection.from_string(selection).resolve(graph)
    except (dg.DagsterError, ValueError) as err:
        raise InvalidInput(f"invalid selection {selection!r}: {err}") from err
    if not keys:
        raise NotFound(f"selection {selection!r} matches no asset")
    return sorted(keys, key=lambda k: k.to_user_string())


def launch(
    settings: Settings,
    selection: str | Sequence[AssetKey],
    requested_by: str,
    *,
    ingest_config: Mapping[AssetKey, Mapping[str, object]] | None = None,
    on_progress: Callable[[str], None] = lambda _: None,
    run_id: str | None = None,
    verbose: bool = False,
) -> RunOutcome:
    """Run the selected assets in one Dagster run of the code location, on the shared instance: decided
    by the instance's run coordinator as the UI's runs are, then executed in this process."""
    asked = selected(settings, selection, ingest_config or {})
    console = VERBOSE_CONSOLE if verbose else QUIET_CONSOLE
    run_config = {**console, **asked.run_config}
    keys, defs, partition = asked.keys, asked.defs, asked.tags
    instance = instance_for(settings)
    for gone in fail_runs_of_gone_processes(settings, instance):
        on_progress(f"marked failed: {gone}")
    run_id = run_id or str(uuid.uuid4())
    try:
        with held_for_run(settings, instance, run_id), executed_here(run_id):
            tags = {REQUESTED_BY_TAG: requested_by, **partition}
            planned = plan_run(instance, defs, keys, run_config, tags, run_id)
            admitted(instance, planned.run)
            follower = _Follower(instance, run_id, on_progress)
            follower.start()
            try:
                planned.execute(instance)
            finally:
                follower.stop()
        return run_outcome(instance, run_id)
    except DBAPIError as err:
        raise dagster_storage_failed(settings, run_id, err) from err


def dagster_storage_failed(settings: Settings, run_id: str, err: DBAPIError) -> EnvironmentProblem:
    """A run whose Dagster storage failed under it (a full disk): one line saying so, and what the
    catalog holds of the run, which `custody repair` makes Dagster agree with."""
    from governance.catalog import Catalog

    made = [row.ref for row in Catalog.from_settings(settings, os.environ).versions_of_run(run_id)]
    outcome = (
        f"run {run_id} committed {', '.join(made)}, which `custody repair` records in Dagster"
        if made
        else f"run {run_id} committed nothing"
    )
    return EnvironmentProblem(
        f"Dagster's storage under {settings.dagster_home} failed: {error_summary(err.orig or err)}; {outcome}; "
        "`custody repair` marks the run failed once there is room"
    )


@dataclass(frozen=True)
class Selected:
    """What a run request asks for, checked against the code location: its assets, the config of
    the batches it ingests, and the tags of a feed's hour."""

    defs: dg.Definitions
    keys: list[dg.AssetKey]
    run_config: dict[str, object]
    tags: dict[str, str]


def selected(
    settings: Settings,
    selection: str | Sequence[AssetKey],
    ingest_config: Mapping[AssetKey, Mapping[str, object]],
) -> Selected:
    """The assets `selection` names in the code location the specs make now, each known and
    loadable; a batch named only for a landing asset. A selection of named assets builds only them
    and what is upstream of them, whatever the number of specs; another selection builds them all."""
    named = plain_keys(selection) if isinstance(selection, str) else list(selection)
    if named is None:
        loaded = load_valid_specs(settings.specs, settings.cache_dir, transform_packages=settings.transform_packages)
    else:
        loaded = load_upstream(
            settings.specs, named, settings.cache_dir, transform_packages=settings.transform_packages
        )
    defs = definitions_for(loaded.specs, broken=loaded.broken)
    graph = defs.resolve_asset_graph()
    if isinstance(selection, str):
        keys = resolve_selection(graph, selection)
    else:
        keys = [asset_key(k) for k in selection]
        _check_known(graph, keys)
    _check_loadable(loaded.broken, keys)
    _check_ingestible(graph, ingest_config)
    config, partition = _feed_hour(settings, loaded.specs, ingest_config)
    ops = {"__".join(asset_key(k).path): {"config": dict(cfg)} for k, cfg in config.items()}
    return Selected(defs, keys, {"ops": ops} if ops else {}, partition)


# `key:sales/clients`, or several such terms joined by `or`: assets named, with no wildcard.
NAMED_KEY = r'key:"?([a-z][a-z0-9_]*/[a-z][a-z0-9_]*)"?'
NAMED_KEYS = re.compile(rf"\s*{NAMED_KEY}(\s+or\s+{NAMED_KEY})*\s*")


def plain_keys(selection: str) -> list[AssetKey] | None:
    """The assets a selection names one by one (`key:sales/clients or key:sales/products`); None
    for any other selection, which only the whole asset graph resolves."""
    if NAMED_KEYS.fullmatch(selection) is None:
        return None
    try:
        return [AssetKey.parse(found) for found in re.findall(NAMED_KEY, selection)]
    except InvalidName:
        return None


def _check_known(graph: AssetGraph, keys: Sequence[dg.AssetKey]) -> None:
    known = graph.get_all_asset_keys()
    for key in keys:
        if key not in known:
            raise NotFound(f"unknown asset {key.to_user_string()}: no spec declares it")


def _check_loadable(broken: Mapping[AssetKey, tuple[SpecProblem, ...]], keys: Sequence[dg.AssetKey]) -> None:
    """A selected asset whose spec is broken stops the launch with its problems."""
    problems = [problem for key in keys if len(key.path) == 2 for problem in broken.get(AssetKey(*key.path), ())]
    if problems:
        raise SpecError(problems)


def _check_ingestible(graph: AssetGraph, ingest_config: Mapping[AssetKey, object]) -> None:
    for key in ingest_config:
        if graph.get(asset_key(key)).tags.get("custody/zone") != "landing":
            raise InvalidInput(
                f"{key} is an integration asset: it is built from its inputs, not ingested; use `custody materialize`"
            )


def _feed_hour(
    settings: Settings, specs: SpecSet, ingest_config: Mapping[AssetKey, Mapping[str, object]]
) -> tuple[dict[AssetKey, Mapping[str, object]], dict[str, str]]:
    """A feed's asset is partitioned by the hour: its run names the partition of the batch it lands,
    the one given or the one `batch_to_ingest` chooses, and its config names that batch."""
    from governance.catalog import Catalog
    from governance.feeds.hours import batch_to_ingest
    from governance.lake import open_lake

    config = dict(ingest_config)
    partitions = set()
    for key, given in ingest_config.items():
        feed = specs[key].feed
        if feed is None:
            continue
        named = given.get("batch")
        lake, catalog = open_lake(settings), Catalog.from_url(settings.catalog_url)
        batch, hour = batch_to_ingest(lake, catalog, key, feed, str(named) if named else None)
        config[key] = {**given, "batch": batch}
        partitions.add(hour.strftime(PARTITION_FORMAT))
    if len(partitions) > 1:
        raise InvalidInput(f"one run lands one hour of a feed, not {len(partitions)}: ingest each feed on its own")
    return config, {PARTITION_NAME_TAG: partitions.pop()} if partitions else {}


def run_outcome(instance: dg.DagsterInstance, run_id: str) -> RunOutcome:
    """The versions a finished run made and the failures its steps reported, from its event log."""
    versions, failures = [], []
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            continue
        if event.is_step_materialization:
            versions.append(str(event.step_materialization_data.materialization.metadata["custody/version"].value))
        elif event.is_step_failure:
            failures.append(_failure(event))
    run = instance.get_run_by_id(run_id)
    return RunOutcome(run_id, bool(run and run.is_success), tuple(versions), tuple(failures))


def _failure(event: dg.DagsterEvent) -> StepFailure:
    user = event.step_failure_data.user_failure_data
    metadata = user.metadata if user else {}
    code = metadata.get("custody/exit_code")
    exit_code = code.value if isinstance(code, dg.IntMetadataValue) and code.value is not None else 1
    return StepFailure(event.step_key or "?", step_failure_message(event), exit_code)


class _Follower(threading.Thread):
    """Reads the run's event log while it executes and reports what each step says."""

    def __init__(self, instance: dg.DagsterInstance, run_id: str, report: Callable[[str], None]):
        super().__init__(daemon=True)
        self.instance, self.run_id, self.report = instance, run_id, report
        self.done = threading.Event()
        self.seen = 0

    def run(self) -> None:
        while not self.done.wait(POLL_SECONDS):
            self._poll()

    def stop(self) -> None:
        self.done.set()
        self.join()
        self._poll()

    def _poll(self) -> None:
        try:
            entries = self.instance.all_logs(self.run_id)
        except (dg.DagsterError, DBAPIError):
            return  # the run's own failure says why its log could not be read
        for entry in entries[self.seen :]:
            step = entry.step_key.replace("__", "/") if entry.step_key else ""
            event = entry.dagster_event
            if event is not None and event.event_type_value == "STEP_START":
                self.report(f"{step}: started")
            elif event is not None and entry.user_message.startswith(BLOCKED_BY_POOL):
                pool = entry.user_message.removeprefix(BLOCKED_BY_POOL).strip()
                self.report(f"{step}: waiting: other runs write it up to its limit (pool {pool})")
            elif not entry.is_dagster_event and entry.user_message:
                self.report(f"{step}: {entry.user_message}")
        self.seen = len(entries)
