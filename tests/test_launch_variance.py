"""The variance split of benchmarks/launch_variance.py recovers known components over several seeds."""

import importlib.util
import math
from pathlib import Path

import numpy as np

_path = Path(__file__).resolve().parents[1] / "benchmarks" / "launch_variance.py"
_spec = importlib.util.spec_from_file_location("launch_variance", _path)
launch_variance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(launch_variance)


def _groups(rng, launches, sweeps, sd_between, sd_within):
    return [
        list(np.exp(np.log(2.0) + rng.normal(0, sd_between) + rng.normal(0, sd_within, sweeps)))
        for _ in range(launches)
    ]


def test_between_launch_variance_is_found_when_launches_differ():
    found = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        c = launch_variance.components(_groups(rng, 12, 2, 0.08, 0.02))
        found.append(c["sd_between"] > c["sd_within"] and c["sd_pair_two_launches"] > 2 * c["sd_pair_same_launch"])
    assert sum(found) >= 18


def test_no_between_launch_variance_when_launches_agree():
    ratios = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        c = launch_variance.components(_groups(rng, 12, 2, 0.0, 0.05))
        ratios.append(c["sd_pair_two_launches"] / c["sd_pair_same_launch"])
        assert abs(c["sd_pair_same_launch"] - math.sqrt(2) * 0.05) < 0.05
    # the between component is estimated (truncated at 0), not assumed: it stays small on average
    assert float(np.median(ratios)) < 1.3


def test_too_few_launches_is_no_estimate():
    assert launch_variance.components([[1.0, 1.1]]) is None
    assert launch_variance.components([[1.0], [1.2]]) is None
