"""Custody's asset specs as a Dagster Component. Each instance, declared by a `defs.yaml` of the
project's `defs/` folder, shows some domain folders of the specs root (CUSTODY_SPECS) as assets:
those it names, or every one no other instance names. The code location (`assets.definitions.defs`)
reads the specs once for all instances and defines once what their assets share."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import dagster as dg
import yaml
from pydantic import BaseModel

from assets.dagster_internals import TranslationFn, TranslationFnResolver
from assets.definitions import assets_for
from governance.config import Settings
from governance.errors import InvalidInput, InvalidName
from governance.spec import LoadedSpecs, Spec
from governance.zones import AssetKey

TYPE_NAME = "assets.component.CustodySpecs"
# What the spec declares and Custody governs by it: a translation that changes one is refused.
GOVERNED = (
    "key",
    "deps",
    "owners",
    "code_version",
    "automation_condition",
    "freshness_policy",
    "partitions_def",
    "skippable",
)
GOVERNED_PREFIX = "custody/"


class AssetFacts(BaseModel, frozen=True):
    """What a `translation:` template may name of an asset: `{{ domain }}`, `{{ name }}`, `{{ zone }}`."""

    domain: str
    name: str
    zone: str

    @classmethod
    def of(cls, key: AssetKey, spec: Spec | None) -> AssetFacts:
        return cls(domain=key.domain, name=key.name, zone=spec.body.zone if spec else "")


@dataclass(frozen=True)
class Declared:
    """An instance of the component, as its defs.yaml declares it: the domains it names, or None
    for every domain no other instance names."""

    path: Path
    domains: tuple[str, ...] | None


@dataclass(frozen=True)
class SharedLoad:
    """One load of the code location: the specs, read once, and which instance shows which domain."""

    loaded: LoadedSpecs
    declared: tuple[Declared, ...]
    pending: Mapping[AssetKey, str] = field(default_factory=dict)
    shown: Mapping[AssetKey, Spec] = field(default_factory=dict)

    def domains_of(self, path: Path) -> set[str]:
        """The domains the instance declared in `path` shows."""
        named = {domain for found in self.declared if found.domains for domain in found.domains}
        for found in self.declared:
            if found.path == path:
                return set(found.domains) if found.domains is not None else self.domains() - named
        raise InvalidInput(f"{path}: not an instance of {TYPE_NAME} this code location found in its defs folder")

    def domains(self) -> set[str]:
        return {key.domain for key in self.keys()}

    def keys(self) -> set[AssetKey]:
        return {*(spec.key for spec in self.loaded.specs), *self.loaded.broken}


_LOADING: ContextVar[SharedLoad | None] = ContextVar("custody_specs_load", default=None)


@contextmanager
def loading(shared: SharedLoad) -> Iterator[None]:
    """While the defs folder's instances build their assets, they take them from `shared`."""
    token = _LOADING.set(shared)
    try:
        yield
    finally:
        _LOADING.reset(token)


def declared_in(defs_folder: Path) -> tuple[Declared, ...]:
    """Every instance of the component the folder's `defs.yaml` files declare, checked as a whole:
    each domain belongs to one instance, and at most one takes the domains none names."""
    found = []
    for path in sorted(defs_folder.rglob("defs.yaml")):
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except yaml.YAMLError as err:
            raise InvalidInput(f"{path}: not YAML: {err}") from err
        for document in documents:
            if isinstance(document, dict) and document.get("type") == TYPE_NAME:
                domains = (document.get("attributes") or {}).get("domains")
                found.append(Declared(path, tuple(domains) if isinstance(domains, list) else None))
    _check_one_instance_each(found)
    return tuple(found)


def _check_one_instance_each(found: list[Declared]) -> None:
    owner: dict[str, Path] = {}
    for declared in found:
        for domain in declared.domains or ():
            if domain in owner:
                raise InvalidInput(
                    f"{declared.path}: domains: {domain} is shown by {owner[domain]} too: a domain's specs "
                    "belong to one instance"
                )
            owner[domain] = declared.path
    rest = [declared.path for declared in found if declared.domains is None]
    if len(rest) > 1:
        raise InvalidInput(
            f"{rest[1]}: names no domains, as {rest[0]} does: one instance at most shows the domains no other names"
        )


def check_every_domain_shown(shared: SharedLoad) -> None:
    """A domain of the specs root that no instance shows, or one named that has no specs, is an error."""
    present = shared.domains()
    named = {domain: found.path for found in shared.declared if found.domains for domain in found.domains}
    for domain, path in sorted(named.items()):
        if domain not in present:
            raise InvalidInput(f"{path}: domains: {domain} has no spec in {shared.loaded.specs.root}")
    if not any(found.domains is None for found in shared.declared):
        unshown = sorted(present - set(named))
        if unshown:
            raise InvalidInput(
                f"the specs of domain {unshown[0]} ({shared.loaded.specs.root / unshown[0]}) are shown by no "
                f"instance of {TYPE_NAME}: name it in one's domains, or declare one without domains"
            )


class SpecsFolderScaffolder(dg.Scaffolder):
    """`dg scaffold defs assets.component.CustodySpecs <domain>`: an instance showing the domain's
    folder of the specs root, and, for a new domain, an example spec there to edit."""

    def scaffold(self, request: dg.ScaffoldRequest) -> None:
        domain = request.target_path.name
        try:
            AssetKey(domain, "example")
        except InvalidName as err:
            raise InvalidInput(f"{request.target_path}: the folder's name is the domain's: {err}") from err
        folder = Settings.from_env().specs / domain
        if not folder.is_dir():
            folder.mkdir(parents=True)
            (folder / "example.yaml").write_text(example_spec(domain), encoding="utf-8")
        dg.scaffold_component(request, {"domains": [domain]})


def example_spec(domain: str) -> str:
    return (
        f"# An example landing asset of domain {domain}: rename the file to the asset's name, name the\n"
        "# directory's groups that own, produce and consume it, and declare its columns.\n"
        f"description: An example {domain} table, delivered as CSV.\n"
        f"roles: {{owner: {domain}-owners, producer: {domain}-producers, consumer: {domain}-consumers}}\n"
        "zone: landing\nclassification: internal\nsource: {format: csv, header: true}\n"
        'columns:\n  - {name: id, type: string, nullable: false}\n  - {name: amount, type: "decimal(10,2)"}\n'
    )


@dg.scaffold_with(SpecsFolderScaffolder)
class CustodySpecs(dg.Component, dg.Resolvable, dg.Model):
    """Domain folders of Custody's specs root as assets and asset checks. A broken spec becomes an
    asset that cannot run, saying why, so the others still load; a check of the definitions fails
    on it. The sensors, the ledger's job and the resources are the code location's, once."""

    domains: list[str] | None = None
    """The domain folders of the specs root (CUSTODY_SPECS) this instance shows; by default, every
    one that no other instance names."""

    translation: (
        Annotated[
            TranslationFn[AssetFacts],
            TranslationFnResolver(template_vars_for_translation_fn=lambda facts: facts.model_dump()),
        ]
        | None
    ) = None
    """Dagster's asset attributes to change on each asset, as Dagster's integration components take
    them, with `{{ domain }}`, `{{ name }}` and `{{ zone }}`: its group, tags, kinds, metadata or
    description. What the spec governs (the key, inputs, owners, code version, automation,
    freshness, partitions, and `custody/` tags and metadata) is not a translation's to change."""

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        shared = _LOADING.get()
        if shared is None:
            raise InvalidInput(
                f"{context.path}: {TYPE_NAME} loads within Custody's code location, assets.definitions:defs, "
                "which defines what its instances share"
            )
        path = context.path / "defs.yaml"
        mine = shared.domains_of(path)
        loaded = shared.loaded
        keys = {spec.key for spec in loaded.specs if spec.key.domain in mine}
        broken = {key: problems for key, problems in loaded.broken.items() if key.domain in mine}
        built = assets_for(loaded.specs, keys, pending=shared.pending, broken=broken, shown=shared.shown)
        if self.translation is not None:
            built = [translated(self.translation, path, loaded, item) for item in built]
        return dg.Definitions(assets=built)


def translated(
    translation: TranslationFn[AssetFacts], path: Path, loaded: LoadedSpecs, item: dg.AssetsDefinition | dg.AssetSpec
) -> dg.AssetsDefinition | dg.AssetSpec:
    """The asset as the instance's translation changes it, refused if it changes what the spec governs."""

    def translate(base: dg.AssetSpec) -> dg.AssetSpec:
        key = AssetKey(*base.key.path)
        changed = translation(base, AssetFacts.of(key, loaded.specs.get(key) or loaded.parsed.get(key)))
        refuse_governed_changes(path, base, changed)
        return changed

    return translate(item) if isinstance(item, dg.AssetSpec) else item.map_asset_specs(translate)


def refuse_governed_changes(path: Path, base: dg.AssetSpec, changed: dg.AssetSpec) -> None:
    changes = [name for name in GOVERNED if getattr(changed, name) != getattr(base, name)]
    for kind in ("tags", "metadata"):
        before: Mapping[str, Any] = getattr(base, kind)
        after: Mapping[str, Any] = getattr(changed, kind)
        governed = {key for key in (*before, *after) if key.startswith(GOVERNED_PREFIX)}
        changes += [f"{kind}.{key}" for key in sorted(governed) if before.get(key) != after.get(key)]
    if changes:
        raise InvalidInput(
            f"{path}: translation: changes {', '.join(changes)} of {base.key.to_user_string()}, which its spec "
            "governs; a translation may change the group, tags, kinds, metadata and description"
        )
