"""URL and header templates filled from the environment, as Hoard fills its configuration: the spec
can be shared while the credentials it names stay in each collector's environment.

`${NAME}` is replaced by the variable's value; `$$` is a dollar sign. Messages quote the template,
never the filled value, and `Filled.mask` hides every value a template took from the environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from governance.errors import InvalidInput

PLACEHOLDER = re.compile(r"\$(?:\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<dollar>\$)|(?P<other>.?))")
MASK = "***"


@dataclass(frozen=True)
class Filled:
    """A feed's request with its templates filled, and the secret values it holds."""

    url: str
    headers: tuple[tuple[str, str], ...]
    secrets: frozenset[str]

    def mask(self, text: str) -> str:
        for value in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(value, MASK)
        return text


def fill(template: str, environ: Mapping[str, str], where: str) -> tuple[str, set[str]]:
    """`template` with its variables' values, and those values; refuses an unset variable by name."""
    secrets: set[str] = set()

    def value(match: re.Match) -> str:
        if match["dollar"]:
            return "$"
        name = match["name"]
        if name is None:
            raise InvalidInput(f"{where}: a $ starts ${{NAME}} or is written $$")
        if name not in environ:
            raise InvalidInput(f"{where}: the variable {name} is not set")
        if environ[name]:
            secrets.add(environ[name])
        return environ[name]

    return PLACEHOLDER.sub(value, template), secrets


def fill_request(url: str, headers: Mapping[str, str], environ: Mapping[str, str], feed: str) -> Filled:
    """The URL and headers of `feed` filled in; a header whose value would hold a line break is refused,
    since it would inject a header of its own."""
    filled_url, secrets = fill(url, environ, f"{feed}: source.feed.url")
    if any(ch in filled_url for ch in "\r\n\t ") or any(not ch.isprintable() for ch in filled_url):
        raise InvalidInput(f"{feed}: source.feed.url holds a space or control character once filled in")
    filled_headers = []
    for name, template in headers.items():
        value, found = fill(template, environ, f"{feed}: source.feed.headers.{name}")
        if any(ch in value for ch in "\r\n\0"):
            raise InvalidInput(f"{feed}: source.feed.headers.{name} holds a line break once filled in")
        secrets |= found
        filled_headers.append((name, value))
    return Filled(filled_url, tuple(filled_headers), frozenset(secrets))
