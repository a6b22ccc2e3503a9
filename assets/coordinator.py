"""Custody's run coordinator: the policy decides every run as it is submitted, and the queue holds a
run back while its domain has as many runs in progress as its share allows. Each asset is a pool of
Dagster's own (`pool_of`), whose limit the coordinator sets from the spec as it admits a run: every
run's step that writes the asset, however and from wherever it was launched, takes a slot of it in
the instance's storage first.

Dagster creates a run before it submits it; a refused run is deleted again before the refusal is
raised, so the UI shows the reason at launch and no failed run or red asset is left behind. The
decision is recorded in the ledger as the one each step makes again when it starts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

import dagster as dg

from assets.console import say, verbose
from assets.dagster_internals import (
    AssetCheckExecutionsTable,
    ConfigurableClassData,
    GraphenePythonError,
    RunQueueConfig,
    SerializableErrorInfo,
    SqlEventLogStorage,
    UserFacingGraphQLError,
    pool_limit,
    set_pool_limit,
)
from assets.factory import REQUESTED_BY_TAG, channel, pool_of
from assets.launchers import (
    Deciding,
    Launcher,
    SignedLaunch,
    Taken,
    established,
    launched_by,
    refuse_unsigned,
    signed_in,
)
from governance.errors import CustodyError, EnvironmentProblem, NotFound, NotSignedIn
from governance.spec import Spec, SpecSet, load_upstream, load_valid_specs
from governance.zones import AssetKey
from resources import CustodyResource

ASSET_JOB = "__ASSET_JOB"
# One tag per domain a run writes in: a run of several domains' assets counts against each share,
# which one tag with several values could not.
DOMAIN_TAG = "custody/domain/"
DOMAIN_LIMITS = "domain_max_concurrent_runs"
REFUSED = "Custody refused this run: "


class Refusal(UserFacingGraphQLError):
    """What Custody refused in the webserver: the UI's error dialog shows the decision's reason
    alone, after PREFIX, with no stack of the webserver's own frames under it."""

    PREFIX = "Custody refused this: "

    def __init__(self, reason: str):
        self.reason = reason.removeprefix("denied: ")
        self.message = f"{self.PREFIX}{self.reason}"
        super().__init__(GraphenePythonError(SerializableErrorInfo(self.message, stack=[], cls_name=None)))

    def __str__(self) -> str:
        return self.message


class RunRefused(Refusal):
    """The policy refused a run at submission."""

    PREFIX = REFUSED


class CustodyRunCoordinator(dg.QueuedRunCoordinator):
    """Dagster's queued coordinator, with Custody's decision at submission, each asset's pool limited
    as its spec says (`max_concurrent_runs`, 1 by default), and a share of runs by domain
    (`domain_max_concurrent_runs`)."""

    def __init__(self, domain_max_concurrent_runs: Mapping[str, int] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self._domain_limits = dict(domain_max_concurrent_runs or {})
        self._taken = Taken()

    @classmethod
    def config_type(cls) -> dict[str, dg.Field]:
        inherited = super().config_type()
        # Declared as any config schema, the queued coordinator's is a dict of fields.
        assert isinstance(inherited, dict)
        return {
            **inherited,
            DOMAIN_LIMITS: dg.Field(
                dg.Map(str, int),
                is_required=False,
                description="Runs in progress at once that write assets of a domain, by domain: its share of the cluster.",
            ),
        }

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> CustodyRunCoordinator:
        queued = {key: value for key, value in config_value.items() if key != DOMAIN_LIMITS}
        coordinator = super().from_config_value(inst_data, queued)
        coordinator._domain_limits = dict(config_value.get(DOMAIN_LIMITS) or {})
        return coordinator

    @cached_property
    def custody(self) -> CustodyResource:
        """The catalog and policy of the process's CUSTODY_* environment, opened on first use."""
        return CustodyResource()

    def submit_run(self, context: dg.SubmitRunContext) -> dg.DagsterRun:
        if context.dagster_run.status == dg.DagsterRunStatus.NOT_STARTED:
            run = context.dagster_run
            try:
                self.admit(run, launched_by(context))
            except CustodyError as err:
                refused = RunRefused(str(err))
                say(f"run {run.run_id} refused: {refused.reason}")
                if not verbose():
                    leave_refusals_to_their_line()
                raise refused from err
        return super().submit_run(context)

    def admit(self, run: dg.DagsterRun, launcher: Launcher = None) -> dg.DagsterRun:
        """The run, decided and tagged for its requester and limits; a refused run is deleted and the
        refusal raised."""
        try:
            tags = self.decide(run, launcher)
        except CustodyError:
            forget(self._instance, run.run_id)
            raise
        self._instance.add_run_tags(run.run_id, tags)
        admitted = self._instance.get_run_by_id(run.run_id)
        if admitted is None:
            raise NotFound(f"run {run.run_id} was deleted while it was being admitted")
        return admitted

    def decide(self, run: dg.DagsterRun, launcher: Launcher = None) -> dict[str, str]:
        """Decide the run and record the decisions; the tags that name its requester and count it
        against its limits."""
        from governance.access.guard import authorize_run
        from governance.dropzone import require_ready_batch
        from governance.runs import RunRequest

        specs = self.specs(_selected_keys(run))
        writes = written(run, specs)
        checked = [spec for spec in checked_only(run, specs) if spec not in writes]
        hold_to_their_limits(self._instance, writes)
        catalog = self.custody.catalog
        policy = self.custody.policy()
        try:
            if isinstance(launcher, SignedLaunch):
                identity = signed_in(catalog, run, launcher, self._taken)
                how = launcher.principal.recorded()
            elif isinstance(launcher, NotSignedIn):
                refuse_unsigned(catalog, run, launcher)
            else:
                landing = writes[0] if len(writes) == 1 and writes[0].is_landing else None
                identity = established(Deciding(self._instance, catalog, policy, self.custody.lake), run, landing)
                how = channel(run.tags)
            authorize_run(catalog, policy, identity, specs, writes, checked, run.run_id, how)
            request = RunRequest(requested_by=identity.user, run_id=run.run_id, assurance=identity.assurance)
            for spec in awaiting_a_batch(run, writes):
                require_ready_batch(catalog, self.custody.lake, spec, request, {"at": "submission", **how})
        finally:
            catalog.checkpoint()
        # The tag names whoever the run was decided for: its steps, run by the daemon's workers,
        # hold the run to them.
        return {REQUESTED_BY_TAG: identity.user, **domain_tags(writes)}

    def specs(self, keys: list[AssetKey] | None = None) -> SpecSet:
        """The valid specs: the code location shows a broken one as an asset no run can select. With
        `keys`, only theirs and those upstream of them, read from their own files."""
        settings = self.custody.settings()
        if keys is not None:
            loaded = load_upstream(
                settings.specs, keys, settings.cache_dir, transform_packages=settings.transform_packages
            )
        else:
            loaded = load_valid_specs(
                settings.specs, settings.cache_dir, transform_packages=settings.transform_packages
            )
        return loaded.specs

    def get_run_queue_config(self) -> RunQueueConfig:
        base = super().get_run_queue_config()
        return RunQueueConfig(
            **{**base._asdict(), "tag_concurrency_limits": [*base.tag_concurrency_limits, *self.limits()]}
        )

    def limits(self) -> list[dict[str, Any]]:
        """The queue's limit for each domain given a share; an asset's own is its pool's."""
        return [{"key": DOMAIN_TAG + domain, "limit": limit} for domain, limit in sorted(self._domain_limits.items())]


class _RefusalsSaid(logging.Filter):
    """Drops a record that logs a refusal's stack: the refusal's own line has said it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], RunRefused))


def leave_refusals_to_their_line() -> None:
    """Dagster's daemon logs a refused run that a sensor or schedule submitted as an error, with the
    refusal's whole stack, on the handlers of its `dagster` logger; the webserver hands the refusal to
    the UI and logs nothing."""
    for handler in logging.getLogger("dagster").handlers:
        if not any(isinstance(f, _RefusalsSaid) for f in handler.filters):
            handler.addFilter(_RefusalsSaid())


def forget(instance: dg.DagsterInstance, run_id: str) -> None:
    """Delete a run and what its creation planned. Dagster plans a run's asset checks when it creates
    the run, in a table `delete_run` leaves alone: left there, a refused run would show its checks as
    skipped on the assets' pages."""
    instance.delete_run(run_id)
    storage = instance.event_log_storage
    if isinstance(storage, SqlEventLogStorage):
        with storage.index_connection() as connection:
            connection.execute(AssetCheckExecutionsTable.delete().where(AssetCheckExecutionsTable.c.run_id == run_id))


def admitted(instance: dg.DagsterInstance, run: dg.DagsterRun) -> dg.DagsterRun:
    """A run created outside the webserver, decided as one submitted to the instance would be."""
    coordinator = instance.run_coordinator
    return coordinator.admit(run) if isinstance(coordinator, CustodyRunCoordinator) else run


def hold_to_their_limits(instance: dg.DagsterInstance, writes: Sequence[Spec]) -> None:
    """Give each written asset's pool the limit its spec declares now. The pools live in the
    instance's storage, so the limit holds across processes and hosts: a storage without them would
    hold nothing, and is refused."""
    if writes and not instance.event_log_storage.supports_global_concurrency_limits:
        raise EnvironmentProblem(
            f"Dagster's storage under {instance.root_directory} has no concurrency pools, which hold each "
            "asset to its limit: run `dagster instance migrate` with DAGSTER_HOME set to it"
        )
    for spec in writes:
        pool, limit = pool_of(spec.key), spec.body.max_concurrent_runs
        if pool_limit(instance, pool) != limit:
            set_pool_limit(instance, pool, limit)


def written(run: dg.DagsterRun, specs: SpecSet) -> list[Spec]:
    """The specs of the assets a run materializes: its selection, or every asset of a whole asset job."""
    if run.asset_selection is not None:
        return _known(run.asset_selection, specs)
    if run.job_name == ASSET_JOB and run.asset_check_selection is None:
        return list(specs)
    return []


def awaiting_a_batch(run: dg.DagsterRun, writes: Sequence[Spec]) -> list[Spec]:
    """The landing assets a run ingests without naming a batch: each takes its oldest ready one. A
    feed's partition names its hour, which its step checks."""
    return [spec for spec in writes if spec.takes_batches and not spec.feed and not named_batch(run, spec)]


def named_batch(run: dg.DagsterRun, spec: Spec) -> object:
    """The batch the run's config names for the asset's op, if any."""
    ops = run.run_config.get("ops")
    op = ops.get(f"{spec.key.domain}__{spec.key.name}") if isinstance(ops, Mapping) else None
    config = op.get("config") if isinstance(op, Mapping) else None
    return config.get("batch") if isinstance(config, Mapping) else None


def _selected_keys(run: dg.DagsterRun) -> list[AssetKey] | None:
    """The assets a run selects or checks, when it names them; None for a whole asset job."""
    if run.asset_selection is None and run.asset_check_selection is None:
        return None if run.job_name == ASSET_JOB else []
    named = [*(run.asset_selection or ()), *(check.asset_key for check in run.asset_check_selection or ())]
    return [AssetKey(*key.path) for key in named if len(key.path) == 2]


def checked_only(run: dg.DagsterRun, specs: SpecSet) -> list[Spec]:
    return _known((check.asset_key for check in run.asset_check_selection or ()), specs)


def _known(keys: Any, specs: SpecSet) -> list[Spec]:
    found = (specs.get(AssetKey(*key.path)) for key in keys if len(key.path) == 2)
    return [spec for spec in found if spec is not None]


def domain_tags(writes: Sequence[Spec]) -> dict[str, str]:
    return {DOMAIN_TAG + spec.key.domain: "1" for spec in writes}
