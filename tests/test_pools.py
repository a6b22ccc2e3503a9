"""Thread pools a process keeps across runs."""

from __future__ import annotations

import os
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq

from governance.content import WORKERS, digest_parquet
from governance.pools import kept, settled


def threads_named(prefix: str) -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name.startswith(prefix)}


def test_hashing_versions_keeps_the_threads_it_started(tmp_path):
    path = tmp_path / "part-00000.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "name": ["a", None, "c"], "amount": [1.5, 2.5, None]}), path)
    first = digest_parquet([path])
    started = threads_named("custody-digest")
    assert started
    for _ in range(5):
        assert digest_parquet([path]) == first
    kept_threads = threads_named("custody-digest")
    # The pool may start a thread more while tasks are queued, up to its size and the prefetch's one.
    assert started <= kept_threads and len(kept_threads) <= WORKERS + 1
    assert all(thread.is_alive() for thread in started)


def test_settled_waits_for_every_started_task_whatever_it_raised_and_cancels_the_queued():
    pool = kept("test-settled", 2)
    done = []

    def slow(fail: bool) -> None:
        time.sleep(0.2)
        done.append(fail)
        if fail:
            raise ValueError("failed")

    futures = [pool.submit(slow, True), pool.submit(slow, False), pool.submit(slow, False), None]
    time.sleep(0.05)  # the first two have started; the third waits for a thread
    settled(futures)
    assert sorted(done) == [False, True]
    assert futures[2].cancelled()


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
