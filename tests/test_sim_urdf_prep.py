"""The prepared-URDF cache under concurrent processes (``teleop tune --jobs``, parallel tests)."""

import multiprocessing
import os
import time
import xml.etree.ElementTree as ET


def _prepare_at(args: tuple[str, float]) -> str:
    cache, start = args
    os.environ["XDG_CACHE_HOME"] = cache
    from teleop.robot.description import load_description
    from teleop.sim.urdf_prep import prepare_urdf

    description = load_description("icub")
    while time.time() < start:    # all processes write the same cache entry at once
        pass
    try:
        ET.parse(prepare_urdf(description.urdf_path, set(description.frames.values()), visual=False))
    except Exception as exc:      # noqa: BLE001 - the test reports what went wrong
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def test_processes_preparing_the_same_urdf_at_once_all_read_a_whole_file(tmp_path):
    """Before each process wrote its own temporary file, 25 of 60 such processes crashed
    (one renamed another's file away) or parsed a truncated URDF."""
    context = multiprocessing.get_context("spawn")
    results = []
    for round_ in range(2):
        cache = tmp_path / f"cache{round_}"
        with context.Pool(4) as pool:
            results += pool.map(_prepare_at, [(str(cache), time.time() + 3.0)] * 4)
    assert results == ["ok"] * len(results)
