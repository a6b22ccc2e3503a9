"""Single sign-on through an authenticating gateway (Apache httpd with mod_authnz_ldap or
mod_auth_openidc, Knox, a company's proxy): the gateway names the user it authenticated in a header,
which Custody trusts only from the gateway itself, proven by a shared secret it adds, by the address it
connects from, or both. A request that names a user in that header and is not proven to come from the
gateway is refused, whatever else it carries."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

from starlette.requests import HTTPConnection

from governance.access.directory import checked_name
from governance.envsecrets import read_secret
from governance.errors import DuplicateGatewayHeader, InvalidInput, InvalidName, UntrustedGateway, shown
from governance.service.sessions import GATEWAY_METHOD as METHOD
from governance.service.sessions import SHORTEST_SECRET, Principal, key_of

HEADER_VARIABLE = "CUSTODY_GATEWAY_USER_HEADER"
SECRET_VARIABLE = "CUSTODY_GATEWAY_SECRET"
PEERS_VARIABLE = "CUSTODY_GATEWAY_PEERS"
SECRET_HEADER = "x-custody-gateway-secret"


@dataclass(frozen=True)
class Gateway:
    header: str  # lower case, as ASGI gives headers
    secret: str | None
    peers: tuple[IPv4Network | IPv6Network, ...]

    def __repr__(self) -> str:
        secret = "***" if self.secret else None
        return f"Gateway(header={self.header!r}, secret={secret}, peers={self.peers!r})"

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Gateway | None:
        """The gateway the environment configures; None when CUSTODY_GATEWAY_USER_HEADER is unset."""
        header = environ.get(HEADER_VARIABLE, "").strip()
        if not header:
            return None
        secret = read_secret(environ, SECRET_VARIABLE) or None
        peers = tuple(_network(part.strip()) for part in environ.get(PEERS_VARIABLE, "").split(",") if part.strip())
        if secret is None and not peers:
            raise InvalidInput(
                f"{HEADER_VARIABLE} is set, but neither {SECRET_VARIABLE} nor {PEERS_VARIABLE}: a header "
                "trusted from anyone is a name anyone types; set the gateway's secret, its addresses, or both"
            )
        if secret is not None and len(secret) < SHORTEST_SECRET:
            raise InvalidInput(f"{SECRET_VARIABLE} is shorter than {SHORTEST_SECRET} characters")
        return cls(header.lower(), secret, peers)

    def principal(self, connection: HTTPConnection) -> Principal | None:
        """The user the gateway vouches for; None when the request names nobody in its header.
        UntrustedGateway when it names someone but is not proven to come from the gateway, or
        carries the user's or the secret's header more than once: which one the gateway set cannot
        be told, so none is taken."""
        for header in (self.header, SECRET_HEADER):
            if len(connection.headers.getlist(header)) > 1:
                raise DuplicateGatewayHeader(f"a request carrying the {header} header more than once is refused")
        named = connection.headers.get(self.header)
        if not named:  # httpd gives an empty name where it authenticated nobody
            return None
        peer = connection.client.host if connection.client else "unknown"
        if self.peers and not _among(peer, self.peers):
            raise UntrustedGateway(f"a {self.header} header from {peer}, which is not the gateway, is refused")
        if self.secret is not None:
            given = connection.headers.get(SECRET_HEADER, "")
            if not hmac.compare_digest(given.encode(), self.secret.encode()):
                raise UntrustedGateway(f"a {self.header} header without the gateway's secret is refused")
        try:
            user = checked_name(named)
        except InvalidName as err:
            raise UntrustedGateway(f"the gateway named an invalid user {shown(named)!r}") from err
        return Principal(user, METHOD, key_of(f"{METHOD} {peer}"))

    def warning(self) -> str | None:
        """What whoever starts the service should know of how the gateway is trusted, if anything."""
        if self.secret is not None:
            return None
        addresses = ", ".join(str(network) for network in self.peers)
        return (
            f"warning: the gateway is trusted by its address alone ({PEERS_VARIABLE}): any process that can "
            f"connect from {addresses} can name any user in {self.header}; set {SECRET_VARIABLE} too, "
            "which the gateway adds to each request"
        )

    def strips(self) -> frozenset[bytes]:
        """The headers that never go further than the gate."""
        return frozenset({self.header.encode(), SECRET_HEADER.encode()})


def _network(text: str) -> IPv4Network | IPv6Network:
    try:
        return ip_network(text, strict=False)
    except ValueError as err:
        raise InvalidInput(
            f"{PEERS_VARIABLE}: {text!r} is not an address or network (such as 10.0.0.5 or 10.0.0.0/24)"
        ) from err


def _among(peer: str, networks: tuple[IPv4Network | IPv6Network, ...]) -> bool:
    """Whether the peer's address is in one of `networks`; an address that is no IP address is not.
    An IPv4 peer of a dual-stack socket (`::ffff:10.0.0.5`) counts as its IPv4 address."""
    try:
        address = ip_address(peer)
    except ValueError:
        return False
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)
