"""The service's secrets and what its home keeps: a secret given in the environment is not left in what
the kernel shows of the service's processes, one may be given in a file its owner alone reads, the
catalog keeps nothing a cookie could be made of, and a home Custody makes is its owner's alone."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from itsdangerous import URLSafeTimedSerializer
from sqlmodel import select

from governance.catalog import Catalog
from governance.catalog.models import ServiceSession
from governance.config import Settings
from governance.demo import demo_password
from governance.lake import open_lake
from tests.conftest import ROOT, plain_environ
from tests.dagster_servers import CUSTODY, SignedIn, start_service, stop

SECRET = "a-session-key-for-tests-only-0123456789"


def descendants(pid: int) -> list[int]:
    """`pid` and every process it started, and those they started."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        children = Path(f"/proc/{current}/task/{current}/children")
        if children.exists():
            queue.extend(int(child) for child in children.read_text().split())
    return found


def environ_of(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return b""  # it ended meanwhile


def test_a_secret_given_in_the_environment_is_in_no_environment_the_service_s_processes_show(tmp_path):
    home = tmp_path / "home"
    server, port = start_service(Settings.under(home), {**plain_environ(home), "CUSTODY_SESSION_SECRET": SECRET})
    try:
        assert SignedIn(port, "carol", demo_password("carol")).post("/graphql", {"query": "{ version }"}).ok
        shown = {pid: environ_of(pid) for pid in descendants(server.pid)}
    finally:
        stop(server)
    assert len(shown) > 1  # the service, and the code server its UI started
    assert [pid for pid, environ in shown.items() if SECRET.encode() in environ] == []


def test_a_secret_is_taken_from_the_file_its_variable_names_which_its_owner_alone_may_read(tmp_path):
    home = tmp_path / "home"
    key = tmp_path / "session.key"
    key.write_text(SECRET + "\n")
    key.chmod(0o600)
    env = {**plain_environ(home), "CUSTODY_SESSION_SECRET_FILE": str(key)}
    server, port = start_service(Settings.under(home), env, ui=False)
    try:
        carol = SignedIn(port, "carol", demo_password("carol"))
        cookie = carol.http.cookies["custody_session"]
    finally:
        stop(server)
    URLSafeTimedSerializer(SECRET.encode(), salt="custody-session").loads(cookie)  # signed with the file's key
    key.chmod(0o640)
    said = subprocess.run(
        [str(CUSTODY), "serve", "--no-ui", "--port", "0"],
        cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert said.returncode == 1
    assert said.stderr.strip() == f"error: CUSTODY_SESSION_SECRET_FILE={key}: others may read it: `chmod 600 {key}`"


def test_a_cookie_made_from_what_the_catalog_keeps_with_the_service_s_key_is_refused(tmp_path):
    home = tmp_path / "home"
    server, port = start_service(Settings.under(home), {**plain_environ(home), "CUSTODY_SESSION_SECRET": SECRET})
    try:
        carol = SignedIn(port, "carol", demo_password("carol"))
        with Catalog.from_settings(Settings.under(home), {}).reading() as session:
            [row] = session.exec(select(ServiceSession)).all()
        signer = URLSafeTimedSerializer(SECRET.encode(), salt="custody-session")
        assert row.id != signer.loads(carol.http.cookies["custody_session"])  # kept as its digest alone
        forged = SignedIn(port)
        forged.http.cookies.set("custody_session", signer.dumps(row.id))
        answer = forged.post("/graphql", {"query": "{ version }"})
    finally:
        stop(server)
    assert (answer.status_code, answer.json()) == (
        401,
        {"detail": "this session is unknown to the catalog: sign in again"},
    )


def test_a_home_custody_makes_and_its_catalog_are_their_owner_s_alone(tmp_path):
    home = tmp_path / "new-home"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}, **plain_environ(home)}
    done = subprocess.run(
        [str(CUSTODY), "catalog"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "catalog.db").stat().st_mode) == 0o600


def test_the_default_folder_lake_custody_makes_is_its_owner_s_alone(tmp_path):
    lake = open_lake(Settings.under(tmp_path / "new-home"))
    assert stat.S_IMODE(Path(lake.root).stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "new-home").stat().st_mode) == 0o700
