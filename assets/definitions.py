"""The code location: one Definitions object built from the asset specs."""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from assets.factory import broken_asset, build_assets
from assets.maintenance import ledger_maintenance, nightly_ledger_maintenance
from assets.sensors import automation_sensor, dropzone_sensor, feeds_sensor, streams_sensor
from governance.collector import few_collections
from governance.config import AUTOMATION_SECONDS, DROPZONE_SENSOR_SECONDS, Settings
from governance.errors import CustodyError, SpecError, SpecProblem
from governance.spec import LoadedSpecs, Spec, SpecSet, load_valid_specs
from governance.spec.messages import FramedSpecError
from governance.zones import AssetKey
from resources import CustodyResource, SparkResource

DEFS_FOLDER = Path(__file__).with_name("defs")
# Set by `dg check defs` (and `dagster definitions validate`) while it loads the definitions.
VALIDATING = "DAGSTER_IS_DEFS_VALIDATION_CLI"
CUSTODY_DESCRIPTION = "Custody's catalog, lake, directory and policy, from the CUSTODY_* environment."
SPARK_DESCRIPTION = "The Spark session, with the master and settings of CUSTODY_SPARK_MASTER and CUSTODY_SPARK_CONF."


def build_definitions(
    specs_dir: Path,
    cache_dir: Path | None = None,
    *,
    transform_packages: tuple[str, ...],
    catalog_url: str | None = None,
) -> dg.Definitions:
    """Every valid spec as an asset; each broken one as an asset that cannot run, saying why, with
    the lineage, owners and kinds of its definition in force in the catalog at `catalog_url`."""
    loaded = load_valid_specs(specs_dir, cache_dir, transform_packages=transform_packages)
    return definitions_for(loaded.specs, broken=loaded.broken, shown=shown_broken(loaded, catalog_url))


def definitions_for(
    specs: SpecSet,
    *,
    sensor_running: bool = True,
    sensor_seconds: int = DROPZONE_SENSOR_SECONDS,
    automation_seconds: int = AUTOMATION_SECONDS,
    pending: Mapping[AssetKey, str] | None = None,
    broken: Mapping[AssetKey, tuple[SpecProblem, ...]] | None = None,
    shown: Mapping[AssetKey, Spec] | None = None,
) -> dg.Definitions:
    """Every spec's asset, with what they share: the code location of one folder, as the CLI builds it."""
    return dg.Definitions.merge(
        dg.Definitions(assets=assets_for(specs, pending=pending, broken=broken, shown=shown)),
        shared_definitions(
            specs, sensor_running=sensor_running, sensor_seconds=sensor_seconds, automation_seconds=automation_seconds
        ),
    )


def assets_for(
    specs: SpecSet,
    keys: Collection[AssetKey] | None = None,
    *,
    pending: Mapping[AssetKey, str] | None = None,
    broken: Mapping[AssetKey, tuple[SpecProblem, ...]] | None = None,
    shown: Mapping[AssetKey, Spec] | None = None,
) -> list[dg.AssetsDefinition | dg.AssetSpec]:
    """The asset of each valid spec (of `keys` alone, when given) and of each broken one."""
    shown = shown or {}
    # Dagster's code references are in beta: it would say so for each asset's link to its spec.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        return [
            *build_assets(specs, pending, keys),
            *(broken_asset(key, problems, shown.get(key)) for key, problems in (broken or {}).items()),
        ]


def shared_definitions(
    specs: SpecSet,
    *,
    sensor_running: bool = True,
    sensor_seconds: int = DROPZONE_SENSOR_SECONDS,
    automation_seconds: int = AUTOMATION_SECONDS,
) -> dg.Definitions:
    """What every folder's assets share, defined once: the sensors over all the specs, the ledger's
    job and schedule, the resources and the executor."""
    dropzone = dropzone_sensor(specs, running=sensor_running, every_seconds=sensor_seconds)
    automation = automation_sensor(specs, every_seconds=automation_seconds)
    return dg.Definitions(
        jobs=[ledger_maintenance],
        schedules=[nightly_ledger_maintenance],
        sensors=[sensor for sensor in (dropzone, feeds_sensor(specs), automation, streams_sensor(specs)) if sensor],
        resources={
            "custody": bound(CustodyResource(), CUSTODY_DESCRIPTION),
            "spark": bound(SparkResource(), SPARK_DESCRIPTION),
        },
        executor=dg.in_process_executor,
    )


def bound(resource: dg.ConfigurableResource, description: str) -> dg.ResourceDefinition:
    """A resource as the code location's environment configures it, taking no run config: the
    catalog, the ledger, the directory, the policy and Spark are never a Launchpad's to change, and
    the Launchpad flags any config given for them. A Spark setting could run code in the run's
    process (Java options, jars), where the catalog's and the directory's credentials are."""
    return dg.ResourceDefinition(resource_fn=Configured(resource), config_schema={}, description=description)


class Configured:
    """The one object of a resource the environment configures, for every run. Dagster names a
    resource's type after its function's module and name: here, the resource's own class."""

    def __init__(self, resource: dg.ConfigurableResource):
        self.resource = resource
        self.__name__ = type(resource).__name__
        self.__module__ = type(resource).__module__

    def __call__(self, _: dg.InitResourceContext) -> dg.ConfigurableResource:
        return self.resource


@dg.definitions
def defs() -> dg.Definitions:
    """The project's defs folder: the instances of the Custody component its `defs.yaml` files
    declare (assets.component), which take their assets from one read of the specs, and what those
    assets share, defined once."""
    from assets.component import SharedLoad, check_every_domain_shown, declared_in, loading

    settings = Settings.from_env()
    try:
        declared = declared_in(DEFS_FOLDER)
        with _few_collections():
            loaded = load_valid_specs(
                settings.specs, settings.cache_dir, transform_packages=settings.transform_packages
            )
            if os.environ.get(VALIDATING) == "1":
                refuse_problems(loaded)
            shared = SharedLoad(
                loaded,
                declared,
                pending=awaiting_approval(settings, loaded.specs),
                shown=shown_broken(loaded, settings.catalog_url),
            )
            check_every_domain_shown(shared)
            # Dagster goes over every asset the components built once more, to note where each was declared.
            with loading(shared):
                tree = dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
                return dg.Definitions.merge(tree, shared_definitions_of(settings, loaded.specs))
    except Exception as err:
        found = _custody_error(err)
        if found is None:
            raise
        # Raised here, outside the tree of components, a check of the definitions shows the problem
        # (each of a spec's with its line) instead of Dagster's wrapping of it and both stacks.
        if isinstance(found, SpecError):
            raise FramedSpecError(found.problems) from None
        raise found.with_traceback(None) from None


def _custody_error(err: BaseException | None) -> CustodyError | None:
    """The error of Custody's that caused `err`, if one did."""
    while err is not None and not isinstance(err, CustodyError):
        err = err.__cause__
    return err


def refuse_problems(loaded: LoadedSpecs) -> None:
    """A check of the definitions fails on any broken spec (SpecError, naming every problem)."""
    problems = [*loaded.unplaced, *(problem for found in loaded.broken.values() for problem in found)]
    if problems:
        raise SpecError(sorted(set(problems), key=str))


def shared_definitions_of(settings: Settings, specs: SpecSet) -> dg.Definitions:
    return shared_definitions(
        specs,
        sensor_running=settings.dropzone_sensor,
        sensor_seconds=settings.dropzone_sensor_seconds,
        automation_seconds=settings.automation_seconds,
    )


def load_definitions(settings: Settings, specs_dir: Path) -> dg.Definitions:
    """Every spec under `specs_dir` as an asset, with the sensors, jobs and resources around them;
    each broken spec as an asset that cannot run, saying why: the code location without its defs
    folder and component."""
    with _few_collections():
        loaded = load_valid_specs(specs_dir, settings.cache_dir, transform_packages=settings.transform_packages)
        return definitions_for(
            loaded.specs,
            sensor_running=settings.dropzone_sensor,
            sensor_seconds=settings.dropzone_sensor_seconds,
            automation_seconds=settings.automation_seconds,
            pending=awaiting_approval(settings, loaded.specs),
            broken=loaded.broken,
            shown=shown_broken(loaded, settings.catalog_url),
        )


def shown_broken(loaded: LoadedSpecs, catalog_url: str | None) -> dict[AssetKey, Spec]:
    """The spec each broken asset is shown with: its definition in force, when the catalog has one,
    else its own file where that was read (only what it names is wrong)."""
    from governance.inforce import applied

    in_force = applied(catalog_url, loaded.specs.root, list(loaded.broken)) if catalog_url else {}
    return {**loaded.parsed, **in_force}


def awaiting_approval(settings: Settings, specs: SpecSet) -> dict[AssetKey, str]:
    """The assets whose spec file an owner has yet to apply, with the reason their runs are refused."""
    from governance.inforce import awaiting

    return awaiting(settings.catalog_url, specs, settings.specs_approval)


@contextmanager
def _few_collections() -> Iterator[None]:
    """Custody allocates many objects for every spec it reads, Dagster for every asset it builds, and
    Python's collector, each time it reaches its oldest generation, walks every object the process
    holds. The process keeps its modules, specs and definitions until it exits: frozen, they are no
    longer walked, neither during the read and the build, where the collector also runs less often,
    nor while Dagster resolves the asset graph and its jobs afterwards. At 3,000 specs, freezing the
    definitions too took a load from about 5.1 s to 4.1 s; at 10,000, reading the specs with the
    collector held back took 0.87 s instead of 1.15 s (2.5 s instead of 2.8 s with none cached).
    The build's own garbage is collected first, so that what is frozen is what the process keeps;
    a build that fails is not frozen. Nothing is frozen either when the collector was already held
    back: within a build under way (the component's, within the defs folder's), or while another
    thread walks lineage.

    Dagster's own processes freeze too: each loads the code location once and keeps it until it
    exits (a code server, a run's worker, `dg check`; a reload starts a new code server). A frozen
    object is still freed when nothing refers to it; only a cycle among frozen objects that later
    becomes garbage is never collected, so the most a process can keep past its use is what it held
    when it froze, once: a bound, not a leak that grows with its runs."""
    with few_collections() as outermost:
        if outermost:
            gc.freeze()
        yield
    if outermost:
        # What the build left as garbage is nearly all young; collecting the older generations
        # too would walk every definition (0.3 s at 3,000 specs, against 15 ms).
        gc.collect(0)
        gc.freeze()
