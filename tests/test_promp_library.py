"""Task library: save/load round trip and clear errors on wrong files."""

import json
import re

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.learning import learn_promp
from promp.library import FORMAT_VERSION, LibraryFormatError, TaskLibrary
from promp.synthetic import learn_library, make_tasks


@pytest.fixture(scope="module")
def library():
    rng = np.random.default_rng(0)
    tasks = make_tasks(seed=1, n_tasks=3, n_signals=4)
    lib = learn_library(tasks[:2], rng, 5, basis=RBFBasis(9))
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


def test_metadata_is_saved_and_loaded_and_optional(tmp_path, library):
    """The trainer's notes (teleop notes the robot the demonstrations were retargeted to)
    come back as saved; a library saved without any loads with none."""
    noted = TaskLibrary({label: library[label] for label in library}, metadata={"robot": "iCub", "note": "é"})
    noted.save(tmp_path / "noted.npz")
    assert TaskLibrary.load(tmp_path / "noted.npz").metadata == {"robot": "iCub", "note": "é"}
    library.save(tmp_path / "plain.npz")
    assert TaskLibrary.load(tmp_path / "plain.npz").metadata == {}
    with pytest.raises(ValueError, match="metadata must map strings to strings"):
        TaskLibrary(metadata={"robot": 1})          # type: ignore[dict-item]


def test_loading_another_npz_gives_a_clear_error(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, values=np.zeros(3))
    with pytest.raises(LibraryFormatError, match="not a ProMP task library"):
        TaskLibrary.load(path)


def test_loading_a_non_npz_file_gives_a_clear_error(tmp_path):
    path = tmp_path / "junk.npz"
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(LibraryFormatError) as error:
        TaskLibrary.load(path)
    # Not numpy's fallback reason for a file that is neither .npz nor .npy ("contains
    # pickled (object) data ... allow_pickle=", which suggested loading it unsafely).
    assert str(error.value) == f"{path}: not a ProMP task library (not an .npz archive)"


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


def _rewritten(path, library, change):
    """Save ``library`` to ``path`` with its arrays passed through ``change`` (dict -> None)."""
    library.save(path)
    with np.load(path) as data:
        arrays = dict(data)
    change(arrays)
    np.savez(path, **arrays)
    return path


def _raw(tmp_path, library):
    library.save(tmp_path / "good.npz")
    return (tmp_path / "good.npz").read_bytes()


@pytest.mark.parametrize("damage", ["empty", "truncated_half", "truncated_end", "truncated_head",
                                    "flipped_byte", "npy"])
def test_damaged_or_foreign_files_give_a_library_format_error_naming_the_file(tmp_path, library, damage):
    # Before: zipfile.BadZipFile, EOFError or TypeError escaped, which the CLI shows with a
    # traceback (or not at all for EOFError / TypeError, which are no user errors there).
    raw = _raw(tmp_path, library)
    path = tmp_path / f"{damage}.npz"
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated_half":
        path.write_bytes(raw[:len(raw) // 2])
    elif damage == "truncated_end":
        path.write_bytes(raw[:-30])
    elif damage == "truncated_head":
        path.write_bytes(raw[:10])
    elif damage == "flipped_byte":
        corrupt = bytearray(raw)
        corrupt[len(corrupt) // 2] ^= 0xFF          # inside a member's data: its CRC fails
        path.write_bytes(bytes(corrupt))
    else:
        np.save(path.with_suffix(""), np.zeros(3))  # np.save appends ".npy"
        path.write_bytes(path.with_suffix(".npy").read_bytes())
    with pytest.raises(LibraryFormatError, match=f"^{re.escape(str(path))}: ") as info:
        TaskLibrary.load(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("change, message", [
    (lambda a: a.pop("labels"), "no 'labels' field"),
    (lambda a: a.__setitem__("version", np.array("2.0")), "version is not an integer: '2.0'"),
    (lambda a: a.__setitem__("version", np.array(1.5)), "version is not an integer: 1.5"),
    (lambda a: a.pop("t1/block_var"), "task .* is incomplete .*t1/block_var"),
    (lambda a: a.__setitem__("t0/basis", np.array("{not json")), "task .* is malformed"),
    (lambda a: a.__setitem__("t0/durations", np.array([object()], dtype=object)), "task .* is malformed"),
    (lambda a: a.__setitem__("metadata", np.array('{"robot": 3}')), "'metadata' is malformed .*strings to strings"),
    (lambda a: a.__setitem__("metadata", np.array("[")), "'metadata' is malformed"),
    (lambda a: a.__setitem__("metadata", np.zeros(2)), "'metadata' is malformed .*not a JSON string"),
])
def test_missing_or_malformed_fields_give_a_library_format_error(tmp_path, library, change, message):
    path = _rewritten(tmp_path / "lib.npz", library, change)
    with pytest.raises(LibraryFormatError, match=f"^{re.escape(str(path))}: .*{message}"):
        TaskLibrary.load(path)


@pytest.mark.parametrize("field", ["t0/weight_mean", "t0/noise_var", "t0/durations", "t0/low_rank",
                                   "t0/block_var", "t2/dense_cov"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_arrays_in_a_library_file_are_refused(tmp_path, library, field, bad):
    # Before: NaN passed every check (np.any(NaN <= 0) is False) and the library loaded.
    def poison(arrays):
        arrays[field] = arrays[field].copy()
        arrays[field].flat[0] = bad
    path = _rewritten(tmp_path / "lib.npz", library, poison)
    name = field.split("/")[1]
    with pytest.raises(LibraryFormatError,
                       match=f"^{re.escape(str(path))}: task .* is malformed .*{name} must be finite"):
        TaskLibrary.load(path)


def test_a_newer_format_version_asks_for_an_upgrade_an_older_one_for_re_learning(tmp_path, library):
    newer = _rewritten(tmp_path / "newer.npz", library,
                       lambda a: a.__setitem__("version", np.array(FORMAT_VERSION + 1)))
    with pytest.raises(LibraryFormatError, match="newer release.*upgrade") as info:
        TaskLibrary.load(newer)
    assert "re-learn" not in str(info.value)
    older = _rewritten(tmp_path / "older.npz", library,
                       lambda a: a.__setitem__("version", np.array(FORMAT_VERSION - 1)))
    with pytest.raises(LibraryFormatError, match="re-learn"):
        TaskLibrary.load(older)


def test_the_robot_command_ends_in_a_one_line_error_for_an_empty_library_file(tmp_path, capsys):
    from teleop.cli import main

    path = tmp_path / "empty.npz"
    path.write_bytes(b"")
    assert main(["robot", "--library", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"teleop robot: error: {path}: not a ProMP task library" in err
    assert "Traceback" not in err


# ---------------------------------------------------------------- fuzzer-found inputs
def _with_member(tmp_path, library, member, data):
    """The saved library with the bytes of zip ``member`` replaced by ``data``."""
    import zipfile
    good = tmp_path / "good.npz"
    library.save(good)
    path = tmp_path / "bad.npz"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, data if info.filename == member else src.read(info))
    return path


def test_a_member_declaring_a_huge_shape_is_refused_without_allocating_it(tmp_path, library):
    # Before: np.load allocated the declared (2**40,) float64 array: MemoryError.
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"shape": (2 ** 40,), "fortran_order": False,
                                               "descr": "<f8"})
    path = _with_member(tmp_path, library, "t0/durations.npy", buf.getvalue() + b"\0" * 64)
    with pytest.raises(LibraryFormatError, match=f"^{re.escape(str(path))}: corrupt .*t0/durations"):
        TaskLibrary.load(path)


def test_a_deflated_member_claiming_far_more_than_it_holds_is_refused(tmp_path, library):
    """A zip bomb within deflate's limit: an 825 kB file whose t0/low_rank inflates to
    900 MB loaded, and took that memory (the ratio bound was deflate's own, 1100:1)."""
    import io
    import zipfile

    good = tmp_path / "good.npz"
    library.save(good)
    path = tmp_path / "bomb.npz"
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (8 << 20,)})
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename != "t0/low_rank.npy":
                dst.writestr(info.filename, src.read(info))
        with dst.open("t0/low_rank.npy", "w", force_zip64=True) as member:
            member.write(header.getvalue())
            for _ in range(64):
                member.write(b"\0" * (1 << 20))              # 64 MiB of zeros: ~65 kB deflated
    assert path.stat().st_size < 200_000
    with pytest.raises(LibraryFormatError, match=f"^{re.escape(str(path))}: corrupt task library .*t0/low_rank"):
        TaskLibrary.load(path)
    # A library recompressed as numpy does it still loads (its members gain at most ~5:1).
    recompressed = tmp_path / "recompressed.npz"
    with np.load(good) as data:
        np.savez_compressed(recompressed, **{key: data[key] for key in data.files})
    assert TaskLibrary.load(recompressed).labels == library.labels


def test_an_unknown_zip_compression_method_is_a_library_format_error(tmp_path, library):
    # Before: zipfile's NotImplementedError ("That compression method is not supported").
    raw = bytearray(_raw(tmp_path, library))
    raw[8:10] = (99).to_bytes(2, "little")                # first local header
    central = raw.index(b"PK\x01\x02")
    raw[central + 10:central + 12] = (99).to_bytes(2, "little")
    path = tmp_path / "method.npz"
    path.write_bytes(bytes(raw))
    with pytest.raises(LibraryFormatError, match=f"^{re.escape(str(path))}: corrupt task library"):
        TaskLibrary.load(path)


@pytest.mark.parametrize("basis, message", [
    ('{"n_basis": 1e12, "width_factor": 1.0, "margin_factor": 1.0, "width": NaN}', "n_basis .* does not match"),
    ('{"n_basis": 1e999, "width_factor": 1.0, "margin_factor": 1.0, "width": NaN}', "n_basis inf does not match"),
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
])
def test_a_huge_infinite_or_deeply_nested_basis_is_refused(tmp_path, library, basis, message):
    # Before: MemoryError in np.linspace (1e12 centres; 1e9 ran for minutes), OverflowError
    # from int(inf), RecursionError from json.loads.
    path = _rewritten(tmp_path / "lib.npz", library, lambda a: a.__setitem__("t0/basis", np.array(basis)))
    with pytest.raises(LibraryFormatError, match=f"^{re.escape(str(path))}: task .* is malformed .*{message}"):
        TaskLibrary.load(path)


def _negated_dense(arrays):
    key = next(k for k in arrays if k.endswith("/dense_cov"))
    arrays[key] = -arrays[key]


@pytest.mark.parametrize("change, message", [
    (lambda a: a.__setitem__("labels", np.array([a["labels"][0]] * len(a["labels"]))), "labels repeat"),
    (lambda a: a.__setitem__("t0/coupled", np.array("False")), "coupled must be a boolean"),
    (lambda a: a.__setitem__("t0/weight_mean", a["t0/weight_mean"] * (1 + 1j)), "weight_mean must hold real numbers"),
    (_negated_dense, "dense_cov must be positive semi-definite"),
], ids=["repeated-labels", "coupled-string", "complex-weights", "negative-covariance"])
def test_a_library_whose_content_cannot_be_right_is_refused(tmp_path, library, change, message):
    """Each loaded before: the first task of a repeated label was silently replaced,
    bool("False") is True, complex weights lost their imaginary part with a warning, and a
    negative covariance gave negative variances."""
    path = _rewritten(tmp_path / "lib.npz", library, change)
    with pytest.raises(LibraryFormatError, match=f"^{re.escape(str(path))}: .*{message}"):
        TaskLibrary.load(path)
