"""`custody specs`: the owners' asset definitions."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from governance import render
from governance.cli.common import (
    JsonOption,
    emit_json,
    err_console,
    group,
    load_settings,
    open_custody,
)
from governance.errors import SpecError, printable
from governance.spec import check_specs, load_specs

if TYPE_CHECKING:
    from governance.api import Custody

specs_app = group("specs", "Validate asset specs.")


@specs_app.command("check")
def specs_check(
    folder: Annotated[Path | None, typer.Argument(help="Folder of specs (default: CUSTODY_SPECS).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Validate every spec; list every problem with its file, line and field."""
    settings = load_settings()
    root = folder or settings.specs
    allowed = settings.transform_packages
    problems = check_specs(root, settings.cache_dir, transform_packages=allowed)
    if not problems:
        specs = load_specs(root, settings.cache_dir, transform_packages=allowed)
        problems = _consumer_coverage(open_custody(settings), specs)
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
    gated = [(spec, inputs) for spec, inputs in gated
             if any(i.body.roles.consumer != spec.body.roles.consumer for i in sensitive_inputs(spec, inputs))]
    problems = []
    for spec, inputs in gated:  # only these need the directory
        problems.extend(coverage_problems(spec, inputs, custody.policy.directory))
    return problems
