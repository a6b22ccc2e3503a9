"""A clock stepped back never hides an entry: the ledger's order is its sequence, each entry is
stamped no earlier than the one before it, and a host whose clock is behind the ledger's newest
entry records that it is (`clock.stepped_back`). The clock is stepped back for real, for one process,
by libfaketime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from governance import ledger
from governance.api import PASSWORD_VARIABLE
from governance.cli.ledger import UNVERIFIED
from governance.demo import demo_password
from tests.conftest import ROOT
from tests.helpers import cli, recorded

TWO_HOURS = 7200
CUSTODY = str(Path(sys.executable).with_name("custody"))


def read_two_hours_ago(target: str) -> None:
    """`custody read` run by carol in a process whose clock is two hours behind."""
    done = subprocess.run(
        ["faketime", "-f", f"-{TWO_HOURS}s", CUSTODY, "read", target, "--as", "carol"],
        check=False,
        cwd=ROOT,
        env={**os.environ, PASSWORD_VARIABLE: demo_password("carol"), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_an_entry_made_under_a_clock_stepped_back_is_stamped_no_earlier_than_the_one_before(landed):
    before = recorded()[-1]

    read_two_hours_ago("sales/products@1")

    [warning, *made] = recorded(from_seq=before["seq"] + 1)

    assert warning["action"] == ledger.Action.CLOCK_STEPPED_BACK
    assert [entry["action"] for entry in made] == ["authenticate", "read"]
    assert {entry["ts"] for entry in [warning, *made]} == {before["ts"]}
    # Two hours behind now, less how long ago the entry before was made.
    age = (datetime.now(UTC) - datetime.fromisoformat(before["ts"])).total_seconds()
    assert TWO_HOURS - age - 60 < warning["details"]["behind_seconds"] <= TWO_HOURS


def test_ledger_show_since_finds_it(landed, capsys):
    read_two_hours_ago("sales/products@1")

    code, out, err = cli(capsys, "ledger", "show", "--since", "30m", "--action", "read", "--json", "--as", "dave")

    assert code == 0, err
    assert [entry["asset_key"] for entry in json.loads(out) if entry["actor"] == "carol"] == ["sales/products"]


def test_the_ledger_still_verifies(landed, capsys):
    read_two_hours_ago("sales/products@1")

    code, out, err = cli(capsys, "ledger", "verify")

    assert "chain intact" in out and code == UNVERIFIED, out + err  # no key set: the checkpoints are unsigned
