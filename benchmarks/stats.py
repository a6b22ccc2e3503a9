"""Figures of paired timings: how sure a ratio between two kinds of run is."""

from __future__ import annotations

import random
import statistics

RESAMPLES = 2_000


def interval(kind: list[float], baseline: list[float]) -> tuple[tuple[float, float], tuple[float, float]]:
    """90% bootstrap intervals of the ratio of the medians and of their difference in ms, resampling
    whole rounds so each kind keeps its pairing with the baseline measured beside it."""
    draw = random.Random(0)
    rounds = range(len(kind))
    ratios, added = [], []
    for _ in range(RESAMPLES):
        sample = [draw.choice(rounds) for _ in rounds]
        k, b = statistics.median(kind[i] for i in sample), statistics.median(baseline[i] for i in sample)
        ratios.append(k / b)
        added.append((k - b) * 1000)
    return middle_90(ratios), middle_90(added)


def middle_90(values: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(values, n=20)
    return cuts[0], cuts[-1]
