"""A real OpenLDAP `slapd` for tests: its own configuration, a generated CA, StartTLS, on a loopback port.

`make test` installs slapd; without it the fixtures fail, they never skip.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.ports import free_port, listening

BASE_DN = "dc=custody,dc=test"
ADMIN_DN = f"cn=admin,{BASE_DN}"
SLAPD_CANDIDATES = ("/usr/sbin/slapd", "/usr/local/libexec/slapd")
SCHEMAS = ("core", "cosine", "inetorgperson", "nis")


@dataclass(frozen=True)
class LdapServer:
    url: str
    base_dn: str
    bind_dn: str
    password: str
    ca_file: Path
    process: subprocess.Popen

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=10)


def slapd_executable() -> str:
    for candidate in (shutil.which("slapd"), *SLAPD_CANDIDATES):
        if candidate and Path(candidate).is_file():
            return candidate
    raise RuntimeError("slapd is not installed: `apt-get install slapd ldap-utils` (make test installs it)")


def make_ca(folder: Path, hostname: str = "localhost") -> tuple[Path, Path, Path]:
    """A test CA and a server certificate for `hostname` only, made with openssl."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = folder / "ca.key", folder / "ca.pem"
    key, csr, cert = folder / "server.key", folder / "server.csr", folder / "server.pem"
    extensions = folder / "server.ext"
    extensions.write_text(f"subjectAltName={alternative_names(hostname)}\nextendedKeyUsage=serverAuth\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca_cert),
        "-days",
        "2",
        "-subj",
        "/CN=Custody Test CA",
    )
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={hostname}")
    run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_cert),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-out",
        str(cert),
        "-days",
        "2",
        "-extfile",
        str(extensions),
    )
    key.chmod(0o600)
    return ca_cert, cert, key


def alternative_names(hostname: str) -> str:
    """The names the certificate is for. OpenLDAP's client library (httpd's mod_ldap) checks a
    connection to `localhost` against the machine's own name, so a localhost certificate names it too."""
    names = [hostname]
    if hostname == "localhost":
        names += sorted({socket.gethostname(), socket.getfqdn()} - {"localhost"})
    return ",".join(f"DNS:{name}" for name in names)


def start_slapd(folder: Path, password: str, idle_timeout: int = 0) -> LdapServer:
    """Start slapd on a free loopback port with StartTLS; return once it answers. With
    `idle_timeout`, the server closes connections idle for that many seconds."""
    ca_cert, cert, key = make_ca(folder / "tls")
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    includes = "\n".join(f"include /etc/ldap/schema/{name}.schema" for name in SCHEMAS)
    config = folder / "slapd.conf"
    config.write_text(
        f"""{includes}
pidfile {folder / "slapd.pid"}
idletimeout {idle_timeout}
modulepath /usr/lib/ldap
moduleload back_mdb
TLSCACertificateFile {ca_cert}
TLSCertificateFile {cert}
TLSCertificateKeyFile {key}
database mdb
maxsize 10485760
suffix "{BASE_DN}"
rootdn "{ADMIN_DN}"
rootpw {password}
directory {data}
access to attrs=userPassword
    by self write
    by anonymous auth
    by * none
access to *
    by * read
""",
        encoding="utf-8",
    )
    port = free_port()
    url = f"ldap://localhost:{port}"
    process = subprocess.Popen(
        [slapd_executable(), "-f", str(config), "-h", f"ldap://127.0.0.1:{port}/", "-d", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"slapd exited: {process.stderr.read().decode(errors='replace')[-2000:]}")
        if listening(port, timeout=0.2):
            return LdapServer(url, BASE_DN, ADMIN_DN, password, ca_cert, process)
        time.sleep(0.05)
    process.kill()
    raise RuntimeError("slapd did not answer within 20 s")


PEOPLE = ("alice", "bob", "carol", "dave", "eve")
GROUPS = {  # group -> direct members (users, or groups written as "group:NAME")
    "sales-owners": ["alice"],
    "sales-producers": ["bob"],
    "auditors": ["dave"],
    "sales-consumers": ["carol", "group:auditors"],
    "custody-admins": ["alice"],
}


@contextmanager
def populated_slapd(folder: Path, password: str, idle_timeout: int = 0) -> Iterator[LdapServer]:
    """A running slapd holding the demo's people and groups, stopped on exit."""
    server = start_slapd(folder, password, idle_timeout)
    try:
        populate(server)
        yield server
    finally:
        server.stop()


def password_of(user: str) -> str:
    return f"{user}-Secr3t"


def populate(server: LdapServer) -> None:
    """The demo's people and groups, with `auditors` nested in `sales-consumers`; each user's
    password is `password_of(user)`."""
    connection = admin(server)
    base = server.base_dn
    connection.add(base, ["dcObject", "organization"], {"o": "Custody", "dc": "custody"})
    for unit in ("people", "groups"):
        connection.add(f"ou={unit},{base}", ["organizationalUnit"], {"ou": unit})
    for uid in PEOPLE:
        connection.add(
            f"uid={uid},ou=people,{base}",
            ["inetOrgPerson"],
            {"uid": uid, "cn": uid.title(), "sn": uid.title(), "userPassword": password_of(uid)},
        )
    for group, members in GROUPS.items():
        connection.add(
            group_dn(server, group), ["groupOfNames"], {"cn": group, "member": [member_dn(server, m) for m in members]}
        )
    connection.unbind()


def group_dn(server: LdapServer, group: str) -> str:
    return f"cn={group},ou=groups,{server.base_dn}"


def member_dn(server: LdapServer, member: str) -> str:
    if member.startswith("group:"):
        return group_dn(server, member.removeprefix("group:"))
    return f"uid={member},ou=people,{server.base_dn}"


def admin(server: LdapServer):
    """A connection bound as the directory's administrator, over verified StartTLS."""
    import ssl

    from ldap3 import Connection, Server, Tls

    tls = Tls(ca_certs_file=str(server.ca_file), validate=ssl.CERT_REQUIRED)
    connection = Connection(Server(server.url, tls=tls), server.bind_dn, server.password, raise_exceptions=True)
    connection.open()
    connection.start_tls()
    connection.bind()
    return connection


def environment(server: LdapServer) -> dict[str, str]:
    """The CUSTODY_* variables that point Custody at this server."""
    return {
        "CUSTODY_DIRECTORY": server.url,
        "CUSTODY_LDAP_BASE_DN": server.base_dn,
        "CUSTODY_LDAP_BIND_DN": server.bind_dn,
        "CUSTODY_LDAP_BIND_PASSWORD": server.password,
        "CUSTODY_LDAP_CA_FILE": str(server.ca_file),
    }
