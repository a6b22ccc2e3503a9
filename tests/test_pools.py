"""Thread pools a process keeps across runs."""

from __future__ import annotations

import os
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq

from governance.content import digest_parquet
from governance.pools import kept, settled


def threads_named(prefix: str) -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name.startswith(prefix)}


def test_hashing_a_version_again_starts_no_thread(tmp_path):
    path = tmp_path / "part-00000.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "name": ["a", None, "c"], "amount": [1.5, 2.5, None]}), path)
    first = digest_parquet([path])
    started = threads_named("custody-digest")
    assert started  # the first hash started the pool's threads...
    assert digest_parquet([path]) == first
    assert threads_named("custody-digest") == started  # ...the second used them


def test_settled_waits_for_every_task_whatever_it_raised():
    pool = kept("test-settled", 2)
    done = []

    def slow(fail: bool) -> None:
        time.sleep(0.2)
        done.append(fail)
        if fail:
            raise ValueError("failed")

    futures = [pool.submit(slow, True), pool.submit(slow, False), None]
    settled(futures)
    assert sorted(done) == [False, True]


def test_a_forked_child_starts_pools_of_its_own():
    kept("test-fork", 1).submit(lambda: None).result()  # an idle thread the child will not have
    child = os.fork()
    if child == 0:  # the child leaves here whatever happens, rather than go on with the tests
        code = 1
        try:
            code = 0 if kept("test-fork", 1).submit(lambda: 42).result(timeout=10) == 42 else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    while (ended := os.waitpid(child, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    if ended == (0, 0):
        os.kill(child, 9)
        os.waitpid(child, 0)
    assert ended[0] == child and os.waitstatus_to_exitcode(ended[1]) == 0
