"""Task library: save/load round trip and clear errors on wrong files."""

import json

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.learning import learn_promp
from promp.library import FORMAT_VERSION, LibraryFormatError, TaskLibrary
from promp.synthetic import make_tasks


@pytest.fixture(scope="module")
def library():
    rng = np.random.default_rng(0)
    tasks = make_tasks(seed=1, n_tasks=3, n_signals=4)
    lib = TaskLibrary.learn({t.label: t.demonstrations(rng, 5) for t in tasks[:2]}, basis=RBFBasis(9))
    dense = learn_promp(tasks[2].demonstrations(rng, 5), RBFBasis(7, margin_factor=0.0, width=0.04),
                        covariance="per_signal", signal_names=["a", "b", "c", "d"])
    lib.add("dense", dense.condition(0.3, dense.mean(0.3)))
    return lib


def test_save_load_round_trip(tmp_path, library):
    path = tmp_path / "lib.promp"              # any suffix: written at exactly this path
    library.save(path)
    loaded = TaskLibrary.load(path)
    assert loaded.labels == library.labels
    for label in library:
        a, b = library[label], loaded[label]
        assert a.basis == b.basis and a.coupled == b.coupled and a.structured == b.structured
        np.testing.assert_array_equal(a.weight_mean, b.weight_mean)
        np.testing.assert_array_equal(a.weight_cov, b.weight_cov)
        np.testing.assert_array_equal(a.noise_var, b.noise_var)
        np.testing.assert_array_equal(a.durations, b.durations)
        assert a.signal_names == b.signal_names
        np.testing.assert_allclose(a.mean(np.linspace(0, 1, 5)), b.mean(np.linspace(0, 1, 5)))


def test_loading_another_npz_gives_a_clear_error(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, values=np.zeros(3))
    with pytest.raises(LibraryFormatError, match="not a ProMP task library"):
        TaskLibrary.load(path)


def test_loading_a_non_npz_file_gives_a_clear_error(tmp_path):
    path = tmp_path / "junk.npz"
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(LibraryFormatError, match="not a ProMP task library"):
        TaskLibrary.load(path)


def test_loading_another_version_gives_a_clear_error(tmp_path, library):
    path = tmp_path / "lib.npz"
    library.save(path)
    with np.load(path) as data:
        arrays = dict(data)
    arrays["version"] = np.array(FORMAT_VERSION + 1)
    np.savez(path, **arrays)
    with pytest.raises(LibraryFormatError, match=f"version {FORMAT_VERSION + 1}.*reads version {FORMAT_VERSION}"):
        TaskLibrary.load(path)


def test_mismatched_signal_counts_are_rejected(library):
    rng = np.random.default_rng(2)
    other = learn_promp(make_tasks(seed=3, n_tasks=1, n_signals=2)[0].demonstrations(rng, 3), RBFBasis(9))
    with pytest.raises(ValueError):
        TaskLibrary({"a": library.promps[0], "b": other})
