"""The collector held back while a walk or a build keeps many objects, and given back after."""

from __future__ import annotations

import gc
import threading

import pytest

from governance.collector import FEW_COLLECTIONS, few_collections


@pytest.fixture
def thresholds():
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


def test_the_outermost_block_holds_the_collector_back_and_gives_it_back(thresholds):
    with few_collections() as outermost:
        held = gc.get_threshold()
        with few_collections() as inner:
            assert gc.get_threshold() == held
        assert gc.get_threshold() == held
    assert (outermost, inner) == (True, False)
    assert held == (FEW_COLLECTIONS, *thresholds[1:])
    assert gc.get_threshold() == thresholds


def test_blocks_on_two_threads_give_the_thresholds_back_when_the_last_one_leaves(thresholds):
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[tuple[int, int, int]] = []

    def first() -> None:
        with few_collections():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with few_collections():
            second_in.set()
            first_out.wait(5)
            seen.append(gc.get_threshold())  # the first has left; the second still holds it back

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert seen == [(FEW_COLLECTIONS, *thresholds[1:])]
    assert gc.get_threshold() == thresholds


def test_a_block_that_fails_gives_the_thresholds_back(thresholds):
    with pytest.raises(KeyError), few_collections():
        raise KeyError("spec")
    assert gc.get_threshold() == thresholds
