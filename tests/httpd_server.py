"""Debian's Apache httpd for tests, with the project's own gateway configuration (deploy/httpd/), on a
loopback port in front of a test's `custody serve`.

`make test` installs apache2; without it the fixture fails, it never skips."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import ROOT
from tests.ldap_server import LdapServer
from tests.ports import free_port

APACHE = Path("/usr/sbin/apache2")
MODULES = Path("/usr/lib/apache2/modules")
LOADED = {
    "mpm_event": "mod_mpm_event.so",
    "authn_core": "mod_authn_core.so",
    "authz_core": "mod_authz_core.so",
    "authz_user": "mod_authz_user.so",
    "auth_basic": "mod_auth_basic.so",
    "ldap": "mod_ldap.so",
    "authnz_ldap": "mod_authnz_ldap.so",
    "headers": "mod_headers.so",
    "proxy": "mod_proxy.so",
    "proxy_http": "mod_proxy_http.so",
    "proxy_wstunnel": "mod_proxy_wstunnel.so",
}
GATEWAY_CONF = ROOT / "deploy" / "httpd" / "custody-ldap.conf"


@contextmanager
def httpd_gateway(folder: Path, upstream: int, ldap: LdapServer, secret: str) -> Iterator[int]:
    """httpd on a free port, authenticating against `ldap` and proxying to `upstream`; its port."""
    assert APACHE.is_file(), "the gateway tests need Apache httpd: apt-get install apache2 (make test installs it)"
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    shelf = Path(tempfile.mkdtemp(prefix="custody-httpd-"))
    shelf.chmod(0o755)
    modules = "\n".join(f"LoadModule {name}_module {MODULES / file}" for name, file in LOADED.items())
    user = "User www-data\nGroup www-data\n" if os.getuid() == 0 else ""
    config = folder / "httpd.conf"
    config.write_text(
        f"""ServerRoot {folder}
ServerName localhost
Listen 127.0.0.1:{port}
PidFile {folder / "httpd.pid"}
ErrorLog {folder / "error.log"}
LogLevel warn
DefaultRuntimeDir {folder}
Mutex file:{folder}
{user}{modules}
Include {GATEWAY_CONF}
""",
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "CUSTODY_LDAP_CA_FILE": str(readable_copy(ldap.ca_file, shelf)),
        "CUSTODY_UPSTREAM": f"http://127.0.0.1:{upstream}",
        "CUSTODY_LDAP_AUTH_URL": f"{ldap.url}/ou=people,{ldap.base_dn}?uid?sub?(objectClass=inetOrgPerson)",
        "CUSTODY_GATEWAY_SECRET": secret,
    }
    process = subprocess.Popen(
        [str(APACHE), "-f", str(config), "-DFOREGROUND"], env=env, start_new_session=True, stderr=subprocess.PIPE
    )
    try:
        _answering(port, process, folder / "error.log")
        yield port
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)
        shutil.rmtree(shelf)


def readable_copy(path: Path, shelf: Path) -> Path:
    """A copy of `path` that httpd's workers, which run as www-data, can read: the LDAP library opens
    the CA file when a worker first starts TLS, and a test's folder is its owner's alone."""
    copy = shelf / path.name
    shutil.copyfile(path, copy)
    copy.chmod(0o644)
    return copy


def _answering(port: int, process: subprocess.Popen, log: Path, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/login", timeout=2)
            return
        except urllib.error.HTTPError:
            return  # httpd answers: 401 until someone signs in
        except OSError:
            said = log.read_text(errors="replace") if log.exists() else ""
            assert process.poll() is None, f"httpd exited: {process.stderr.read().decode(errors='replace')} {said}"
            assert time.monotonic() < deadline, f"httpd did not answer in {seconds:g} s: {said[-2000:]}"
            time.sleep(0.1)
