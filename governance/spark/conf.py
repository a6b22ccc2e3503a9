"""Spark on more than one machine: the settings a deployment gives (CUSTODY_SPARK_CONF), and the
project's code packed for a cluster's executors, whose Python workers run our quarantine
explanations and the transforms' UDFs."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import tempfile
import zipfile
from pathlib import Path

from governance.errors import InvalidInput, shown

VARIABLE = "CUSTODY_SPARK_CONF"
KEY = re.compile(r"spark\.[A-Za-z0-9_.\-]+")
# The master is CUSTODY_SPARK_MASTER's: one place to name it, so the two never disagree.
NOT_SETTABLE = frozenset({"spark.master"})
# A zip's entries carry a time; a fixed one gives the same code the same archive name.
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def spark_conf(value: str) -> dict[str, str]:
    """CUSTODY_SPARK_CONF: the path of a file in spark-defaults.conf's form, or `KEY=VALUE` pairs
    separated by commas or new lines."""
    if not value.strip():
        return {}
    candidate = Path(value.strip()).expanduser()
    if "=" not in value or candidate.is_file():
        return conf_file(candidate)
    pairs = {}
    for number, item in enumerate((part.strip() for part in re.split(r"[,\n]", value)), start=1):
        if not item:
            continue
        key, sep, setting = item.partition("=")
        if not sep:
            raise InvalidInput(
                f"{VARIABLE}: item {number} ({shown(item)}) is not KEY=VALUE; "
                "give pairs such as spark.executor.memory=2g,spark.cores.max=4, or a file's path"
            )
        pairs[_key(key.strip(), f"{VARIABLE}: item {number}")] = setting.strip()
    return pairs


def conf_file(path: Path) -> dict[str, str]:
    """A spark-defaults.conf: a key and its value on each line, parted by spaces or `=`; `#` starts a comment."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise InvalidInput(
            f"{VARIABLE}: {path} does not exist; give a spark-defaults.conf file or KEY=VALUE pairs"
        ) from err
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidInput(f"{VARIABLE}: cannot read {path}: {err}") from err
    settings = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        found = re.match(r"(\S+?)\s*(?:=|\s)\s*(.*)$", line)
        if not found or not found.group(2):
            raise InvalidInput(f"{path}, line {number}: {shown(line)} is not a key and a value")
        settings[_key(found.group(1), f"{path}, line {number}")] = found.group(2).strip()
    return settings


def _key(key: str, where: str) -> str:
    if not KEY.fullmatch(key):
        raise InvalidInput(f"{where}: {shown(key)} is not a Spark setting (they start with spark.)")
    if key in NOT_SETTABLE:
        raise InvalidInput(f"{where}: {key} is set by CUSTODY_SPARK_MASTER, not here")
    return key


def code_archive(folder: Path, packages: tuple[str, ...]) -> Path:
    """A zip of the top-level packages `packages` belong to (their Python files), named by its
    content and written once into `folder`: what a cluster's executors put on their path."""
    roots = sorted({package.partition(".")[0] for package in packages})
    files = [(name, path) for root in roots for name, path in _package_files(root)]
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    target = folder / f"custody-code-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".code-", suffix=".zip")
    try:
        with os.fdopen(handle, "wb") as out, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, path in files:
                archive.writestr(zipfile.ZipInfo(name, ZIP_TIME), path.read_bytes())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def _package_files(root: str) -> list[tuple[str, Path]]:
    spec = importlib.util.find_spec(root)
    if spec is None or not spec.submodule_search_locations:
        raise InvalidInput(f"cannot ship package {root} to the Spark executors: it is not an importable package here")
    found = []
    for location in spec.submodule_search_locations:
        base = Path(location)
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" not in path.parts:
                found.append((f"{root}/{path.relative_to(base).as_posix()}", path))
    return found
