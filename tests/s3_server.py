"""An S3-compatible server on a loopback port: moto's standalone server, started as a process."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.ports import free_port, listening

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "custody-test",
    "AWS_SECRET_ACCESS_KEY": "custody-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    # The server's process: a test may stop it (SIGSTOP) to make a store that no longer answers.
    pid: int = 0

    def client(self, service: str = "s3", credentials: Mapping[str, str] = CREDENTIALS):
        """A boto3 client of the server (of S3, or of IAM, whose users and policies moto keeps),
        with the credentials it was started with, or others (AWS_… variables' names and values)."""
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            aws_access_key_id=credentials["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=credentials["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=credentials.get("AWS_SESSION_TOKEN"),
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """The objects under `prefix`, S3A's empty folder markers (`…/`) left out."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []) if item["Key"][-1] != "/")


@contextmanager
def running_s3(settings: Mapping[str, str] | None = None) -> Iterator[S3Server]:
    """Fails, never skips, when moto's server is missing: `make test` installs it. `settings` are
    moto's own, from its environment (INITIAL_NO_AUTH_ACTION_COUNT: check credentials after N requests)."""
    server = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or shutil.which("moto_server")
    if server is None:
        raise RuntimeError("moto_server is not installed: pip install 'moto[server]' (the test extra has it)")
    port = free_port()
    process = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **CREDENTIALS, **(settings or {})},
    )
    try:
        deadline = time.monotonic() + 30
        while not listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto_server did not start on port {port}")
            time.sleep(0.1)
        yield S3Server(f"http://127.0.0.1:{port}", process.pid)
    finally:
        os.kill(process.pid, signal.SIGCONT)  # a stopped server hears no other signal
        process.terminate()
        process.wait(timeout=10)
