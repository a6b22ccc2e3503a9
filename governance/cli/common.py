"""What every command group shares: the root command, consoles, options and the ways to open Custody."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer
from rich.console import Console
from rich.text import Text

from governance import render
from governance.command import collector_paused
from governance.config import SERVICE_URL_VARIABLE, Settings
from governance.errors import InvalidInput, NotFound, printable
from governance.zones import AssetKey

# Every command's module imports this one: what only some commands use is imported when they do,
# so that `custody --help` loads no database library.
if TYPE_CHECKING:
    from governance.access.policy import Identity
    from governance.api import Custody
    from governance.catalog import Catalog
    from governance.service.client import ServiceClient
    from governance.spec import Spec

app = typer.Typer(
    name="custody",
    help="Data-asset governance on Dagster and PySpark: governed ingestion, immutable versions, lineage, ledger.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# Errors quote names and data as they are: no emoji codes (`:x:`) replaced, no markup read in them.
err_console = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
State = {"verbose": False}

JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
ON_BEHALF = (
    " Default: you, the OS user running the command, as the os_users setting maps it to the directory;"
    " naming another user needs their password."
)
AsUser = Annotated[
    str | None,
    typer.Option("--as", help="The user the request is made for (recorded in the ledger)." + ON_BEHALF, metavar="USER"),
]
ByUser = Annotated[
    str | None,
    typer.Option("--by", help="The user making the change (recorded in the ledger)." + ON_BEHALF, metavar="USER"),
]
PasswordStdin = Annotated[
    bool,
    typer.Option(
        "--password-stdin",
        help="Read the user's directory password from stdin (or set CUSTODY_PASSWORD): the directory verifies it.",
    ),
]
DepthOption = Annotated[int | None, typer.Option(min=0, help="How many levels to show (default: all, up to 100).")]


@app.callback()
def _main(
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Show full tracebacks on errors, and Dagster's own log lines of a run."),
    ] = False,
) -> None:
    State["verbose"] = verbose


def group(name: str, help: str) -> typer.Typer:
    """A command group under `custody NAME`."""
    sub = typer.Typer(help=help, no_args_is_help=True)
    app.add_typer(sub, name=name)
    return sub


def service_client() -> ServiceClient | None:
    """The Custody service CUSTODY_URL names, which the commands ask instead of the catalog and the
    lake; None when it is unset, and they work in process."""
    if not os.environ.get(SERVICE_URL_VARIABLE, "").strip():
        return None  # the client and its HTTP library stay unimported: most commands work in process
    from governance.service.client import ServiceClient

    return ServiceClient.from_environ(os.environ)


def load_settings() -> Settings:
    return Settings.from_env()


def open_catalog(settings: Settings) -> Catalog:
    with collector_paused():
        from governance.catalog import Catalog

        return Catalog.from_settings(settings, os.environ)


def open_custody(settings: Settings) -> Custody:
    # Access control is imported by the commands that use it: the others start faster without it.
    with collector_paused():
        from governance.api import Custody

        return Custody(settings, channel="cli")


def read_password(from_stdin: bool) -> str | None:
    """The password piped on stdin, with its line end removed; None without --password-stdin."""
    if not from_stdin:
        return None
    line = sys.stdin.readline()
    given = line.removesuffix("\n")
    if not given:
        raise InvalidInput("--password-stdin: no password on stdin (pipe it in, one line)")
    return given


def identify(custody: Custody, user: str | None, password_stdin: bool, run_id: str | None = None) -> Identity:
    return custody.identity(user, read_password(password_stdin), run_id)


def spec_of(custody: Custody, key: AssetKey) -> Spec:
    spec = custody.specs.get(key)
    if spec is None:
        raise NotFound(f"unknown asset {key}: no spec in {custody.settings.specs} declares it")
    return spec


def emit_json(data: Any) -> None:
    # Indented for a person at a terminal; compact for programs, where Python's fast encoder applies
    # (indenting takes the pure-Python one, ten times slower on a large provenance tree).
    indent = 2 if sys.stdout.isatty() else None
    typer.echo(json.dumps(data, indent=indent, default=str))


def stream_json(items: Iterable[Any]) -> None:
    """A JSON array written an item at a time, so a long list is never held whole. The collector
    waits until it ends: a stream makes a hundred thousand objects that hold no cycle, and would
    only have them walked again and again, a third of the stream's time."""
    from governance.jsontext import json_bytes  # here: `custody --help` loads no encoder

    sys.stdout.flush()  # what was written before, ahead of the bytes
    # A stdout of text alone (redirected to a StringIO) is given the text the bytes encode.
    out = getattr(sys.stdout, "buffer", None) or _TextOut(sys.stdout)
    collecting = gc.isenabled()
    gc.disable()
    try:
        out.write(b"[")
        for number, item in enumerate(items):
            out.write((b",\n" if number else b"\n") + json_bytes(item))
            if not number:  # the first at once, rather than once a buffer fills behind it
                out.flush()
        out.write(b"\n]\n")
        out.flush()
    finally:
        if collecting:
            gc.enable()


class _TextOut:
    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, data: bytes) -> None:
        self.stream.write(data.decode())

    def flush(self) -> None:
        self.stream.flush()


def show(data: Any, as_json: bool, shown: Callable[[], Any]) -> None:
    """`data` as JSON, or what `shown` renders for people."""
    if as_json:
        emit_json(data)
    else:
        render.stdout_console().print(shown())


def progress_printer() -> Callable[[str], None]:
    """Progress as timestamped lines on stderr: readable in logs, unharmed by Spark writing there too."""
    started = time.monotonic()

    def report(message: str) -> None:
        err_console.print(Text.assemble((f"{time.monotonic() - started:6.1f}s ", "dim"), printable(message, keep="\n")))

    return report
