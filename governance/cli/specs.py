"""`custody specs`: the owners' asset definitions."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from governance import render
from governance.cli.common import (
    AsUser,
    JsonOption,
    PasswordStdin,
    emit_json,
    err_console,
    group,
    identify,
    load_settings,
    open_custody,
    service_client,
    show,
)
from governance.errors import SpecError, printable
from governance.zones import AssetKey

if TYPE_CHECKING:
    from governance.api import Custody

specs_app = group("specs", "The owners' asset definitions: validate, compare, apply, and their history.")
AssetsArgument = Annotated[
    list[str] | None, typer.Argument(help="DOMAIN/NAME of each asset (default: all).", metavar="ASSET")
]


@specs_app.command("check")
def specs_check(
    folder: Annotated[Path | None, typer.Argument(help="Folder of specs (default: CUSTODY_SPECS).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Validate every spec; list every problem with its file, line and field.

    Past the files themselves, the directory is asked whether each group a role names exists (once a
    group), and whether everyone who may read an asset may read its pii or higher inputs."""
    from governance.spec import check_specs, load_specs

    settings = load_settings()
    root = folder or settings.specs
    allowed = settings.transform_packages
    problems = check_specs(root, settings.cache_dir, transform_packages=allowed)
    if not problems:
        from governance.access.policy import missing_groups

        specs = load_specs(root, settings.cache_dir, transform_packages=allowed)
        custody = open_custody(settings)
        problems = missing_groups(specs, custody.policy.directory) or _consumer_coverage(custody, specs)
    if as_json:
        emit_json({"ok": not problems, "problems": [asdict(p) for p in problems]})
    elif not problems:
        render.stdout_console().print(f"specs in {root}: ok", markup=False)
    if problems:
        if not as_json:
            err_console.print(printable(str(SpecError(problems)), keep="\n"), markup=False)
        raise typer.Exit(1)


def _consumer_coverage(custody: Custody, specs) -> list:
    """The gate that needs the directory: who may read an asset may read its pii or higher inputs."""
    from governance.access.policy import coverage_problems
    from governance.spec import sensitive_inputs

    gated = [(spec, [specs[key] for key in spec.inputs]) for spec in specs]
    gated = [
        (spec, inputs)
        for spec, inputs in gated
        if any(i.body.roles.consumer != spec.body.roles.consumer for i in sensitive_inputs(spec, inputs))
    ]
    problems = []
    for spec, inputs in gated:  # only these need the directory
        problems.extend(coverage_problems(spec, inputs, custody.policy.directory))
    return problems


@specs_app.command("diff")
def specs_diff(
    assets: AssetsArgument = None,
    from_hash: Annotated[
        str | None,
        typer.Option("--from", help="Compare two recorded specs of one ASSET: the older hash.", metavar="HASH"),
    ] = None,
    to_hash: Annotated[str | None, typer.Option("--to", help="The newer hash (with --from).", metavar="HASH")] = None,
    as_json: JsonOption = False,
) -> None:
    """What the spec files change against the definitions in force, asset by asset: each field added,
    removed or changed, and what follows from it (a new code version, a classification change, who
    gains or loses read access, the dependents affected). With --from and --to, two recorded specs of
    one asset instead."""
    keys = [AssetKey.parse(asset) for asset in assets or []]
    remote = service_client()
    if remote is not None and not (from_hash or to_hash):
        edited = remote.get("/specs/edits", {"asset": [str(key) for key in keys] or None})
        show(edited, as_json, lambda: render.spec_edits(edited))
        return
    from governance.approval import compare, edits

    custody = open_custody(load_settings())
    if from_hash or to_hash:
        if len(keys) != 1 or not (from_hash and to_hash):
            raise typer.BadParameter("--from and --to compare two specs of one ASSET: name it, and give both hashes")
        old, new, found = compare(custody.store, keys[0], from_hash, to_hash)
        data = {"asset": str(keys[0]), "from": old, "to": new, "changes": [change.line() for change in found]}
        show(data, as_json, lambda: render.spec_comparison(data))
        return
    pending = [edit.as_dict() for edit in edits(custody.store, custody.specs, custody.policy.directory, keys)]
    show(pending, as_json, lambda: render.spec_edits(pending))


@specs_app.command("apply")
def specs_apply(
    as_user: AsUser = None,
    assets: AssetsArgument = None,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Put the edited specs in force, all or none: the folder must be valid as a whole, and USER an
    owner of each changed asset (of a new one: in the owner group it names, or an admin). Lowering a
    classification or changing the consumers must also leave every reader allowed to read what the
    asset reads. Each application is a ledger entry (spec.applied) with the diff, and the git commit
    and author of the file where the specs folder is a git checkout."""
    keys = [AssetKey.parse(asset) for asset in assets or []]
    remote = service_client()
    if remote is not None:
        remote.acting_as(as_user, "--as")
        data = remote.send("POST", "/specs/apply", {"assets": [str(key) for key in keys]})
    else:
        from governance.approval import apply

        custody = open_custody(load_settings())
        identity = identify(custody, as_user, password_stdin)
        data = [done.as_dict() for done in apply(custody.store, custody.policy, identity, custody.specs, keys)]
    show(data, as_json, lambda: render.spec_applications(data))


@specs_app.command("history")
def specs_history(asset: Annotated[str, typer.Argument(help="DOMAIN/NAME")], as_json: JsonOption = False) -> None:
    """Each spec of the asset put in force, oldest first: who applied it, when, its hash and what it changed."""
    key = AssetKey.parse(asset)
    remote = service_client()
    if remote is not None:
        entries = remote.get(f"/specs/{key}/history")
    else:
        from governance.approval import history

        entries = [asdict(entry) for entry in history(open_custody(load_settings()).store, key)]
    show(entries, as_json, lambda: render.spec_history(entries))


@specs_app.command("schema")
def specs_schema() -> None:
    """The JSON Schema of a spec file, for editors: the project's `schemas/asset-spec.schema.json` is
    this command's output, and each demo spec names it on its first line (`# yaml-language-server:
    $schema=…`), so an editor with a YAML language server completes fields and flags wrong ones."""
    from governance.spec import spec_schema

    typer.echo(json.dumps(spec_schema(), indent=2))


@specs_app.command("show")
def specs_show(
    target: Annotated[
        str, typer.Argument(help="DOMAIN/NAME@HASH: at least 6 hex digits of the hash.", metavar="ASSET@HASH")
    ],
    as_json: JsonOption = False,
) -> None:
    """A spec the asset had, by its hash (custody specs history lists them), as YAML."""
    from governance.approval import snapshot

    asset, at, prefix = target.partition("@")
    if not at:
        raise typer.BadParameter(f"{target!r}: expected ASSET@HASH, such as sales/products@3f2a9c")
    custody = open_custody(load_settings())
    spec_hash, body = snapshot(custody.store, AssetKey.parse(asset), prefix)
    if as_json:
        emit_json({"asset": asset, "spec_hash": spec_hash, "spec": body})
        return
    typer.echo(render.spec_yaml(asset, spec_hash, body), nl=False)
