"""The `custody` command: one module per command group.

Query commands read the catalog directly. Commands that produce versions (`ingest`, `materialize`,
`demo`) hand off to the Dagster code location, the same path a run launched from the UI takes.
"""

from __future__ import annotations

import inspect

import typer

from governance.catalog import closing_checkpoint
from governance.cli.common import State, app, err_console

# Imported for their commands, in the order `custody --help` lists them.
# isort: off
from governance.cli import runs, queries, catalog, retention, specs, access  # noqa: F401
from governance.cli import directory, settings, ledger, lineage, feeds, tables, streams, serve, login  # noqa: F401

# isort: on
from governance.errors import CatalogUnavailable, CustodyError, printable


def _unwrapped(doc: str) -> str:
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in doc.split("\n\n"))


def _wrap_help_paragraphs() -> None:
    """Typer's rich help keeps a docstring's line breaks; joined, its paragraphs wrap to the terminal."""
    groups = [app, *(info.typer_instance for info in app.registered_groups if info.typer_instance is not None)]
    for group in groups:
        for command in group.registered_commands:
            if command.help is None and command.callback is not None and command.callback.__doc__:
                command.help = _unwrapped(inspect.cleandoc(command.callback.__doc__))


_wrap_help_paragraphs()


def run(args: list[str] | None = None) -> int:
    """Run the CLI and return its exit code: errors become one line on stderr. A command that
    appended to the ledger ends with a checkpoint of its last entry, whatever its outcome."""
    result: object = 0
    try:
        with closing_checkpoint():
            result = app(args=args, prog_name="custody", standalone_mode=False)
    except typer.TyperException as err:
        # Typer declares TyperException without show(), yet raises it only as its click's
        # ClickException, which has it.
        err.show()  # type: ignore[attr-defined]
        return getattr(err, "exit_code", 2)
    except typer.Abort:
        err_console.print("aborted")
        return 1
    except CustodyError as err:
        if isinstance(err, CatalogUnavailable) and isinstance(result, int) and result != 0:
            # The command has said why it failed, naming the catalog it lost; the checkpoint it
            # owes is written by the next command that reaches the catalog.
            return result
        if State["verbose"]:
            err_console.print_exception()
        err_console.print(printable(f"error: {err}", keep="\n"), markup=False)
        return err.exit_code
    return result if isinstance(result, int) else 0
