"""A library of task ProMPs (one per task label) and its versioned file format.

File format (one ``.npz``, no pickles):
    format   = "promp-task-library"           (identifies the file)
    version  = FORMAT_VERSION                  (bumped on any incompatible change)
    labels   = (K,) task labels
    t{i}/basis        JSON of the RBFBasis parameters
    t{i}/weight_mean  (D, k)
    t{i}/noise_var    (D,)
    t{i}/durations    (N,)
    t{i}/coupled      ()  bool
    t{i}/low_rank     (D, k, r) and t{i}/block_var (D,)   for structured models, or
    t{i}/dense_cov    (D*k, D*k)                          for dense ones
    t{i}/signal_names (D,) optional
    t{i}/group_var    (D,) optional (between-performer variance; older files lack it)
    metadata          JSON object of strings, optional: the trainer's notes on how the
                      library was made (promp does not read them; older files lack it)
Loading anything else (another npz or file type, a damaged or incomplete file, NaN / inf
values, an older or newer version) raises :class:`LibraryFormatError` with the file and
the reason.
"""

from __future__ import annotations

import copy
import json
import os
import stat
import zipfile
import zlib
from typing import IO, Any, Callable, ItemsView, Iterator, Mapping, Sequence, cast

import numpy as np
import numpy.typing as npt

from promp.basis import RBFBasis
from promp.learning import Demonstration, learn_promp
from promp.model import ProMP

__all__ = ["TaskLibrary", "LibraryFormatError", "FORMAT_NAME", "FORMAT_VERSION"]

FORMAT_NAME = "promp-task-library"
FORMAT_VERSION = 1


class LibraryFormatError(ValueError):
    """The file is not a task library this code can read."""


class TaskLibrary:
    """Ordered mapping task label -> :class:`ProMP` (all with the same signals)."""

    def __init__(self, promps: Mapping[str, ProMP] | None = None, metadata: Mapping[str, str] | None = None) -> None:
        self._promps: dict[str, ProMP] = {}
        #: What the program that learned the library says of it (e.g. the robot whose
        #: references the demonstrations are), saved and loaded with it; {} when unsaid.
        self.metadata: dict[str, str] = _string_mapping(metadata or {}, "metadata")
        for label, promp in (promps or {}).items():
            self.add(label, promp)

    # ------------------------------------------------------------- container
    def add(self, label: str, promp: ProMP) -> None:
        """Add (or replace) task ``label``: a copy of ``promp`` labelled ``label`` (the same
        ProMP added under two labels kept only the last; the arrays are shared, not copied).
        ValueError if its number of signals differs from the library's."""
        if self._promps:
            first = next(iter(self._promps.values()))
            if promp.n_signals != first.n_signals:
                raise ValueError(f"task {label!r} has {promp.n_signals} signals, library has {first.n_signals}")
        labelled = copy.copy(promp)
        labelled.label = label
        self._promps[label] = labelled

    @property
    def labels(self) -> list[str]:
        return list(self._promps)

    @property
    def promps(self) -> list[ProMP]:
        return list(self._promps.values())

    @property
    def n_signals(self) -> int:
        return next(iter(self._promps.values())).n_signals if self._promps else 0

    def index(self, label: str) -> int:
        return self.labels.index(label)

    def __getitem__(self, label: str) -> ProMP:
        return self._promps[label]

    def __len__(self) -> int:
        return len(self._promps)

    def __iter__(self) -> Iterator[str]:
        return iter(self._promps)

    def items(self) -> ItemsView[str, ProMP]:
        return self._promps.items()

    @classmethod
    def learn(cls, demos_by_label: Mapping[str, Sequence[Demonstration]], **learn_kwargs: Any) -> "TaskLibrary":
        """Learn one ProMP per label (keyword arguments go to :func:`promp.learning.learn_promp`)."""
        return cls({label: learn_promp(demos, label=label, **learn_kwargs)
                    for label, demos in demos_by_label.items()})

    # ------------------------------------------------------------------ file
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the library to ``path`` (an .npz file, written at exactly that path).

        Atomically: the file is written beside ``path`` under a unique temporary name and
        renamed onto it once complete and on disk, so that whatever stops the writing (a full
        disk, an interrupt) leaves the previous file whole, or none: written in place, a full
        disk left a truncated library the robot station refused, and the good one it replaced
        was lost. The temporary file is removed on any failure. Through a symlink, the file
        it points to is replaced and the link kept; an existing file's permissions are kept.

        Raises:
            OSError: naming ``path`` (``[Errno 28]`` alone did not say which file).
        """
        arrays: dict[str, Any] = {
            "format": np.array(FORMAT_NAME), "version": np.array(FORMAT_VERSION),
            "labels": np.array(self.labels, dtype=str),
        }
        if self.metadata:
            arrays["metadata"] = np.array(json.dumps(_string_mapping(self.metadata, "metadata")))
        for i, promp in enumerate(self.promps):
            p = f"t{i}/"
            arrays[p + "basis"] = np.array(json.dumps(promp.basis.to_dict()))
            arrays[p + "weight_mean"] = promp.weight_mean
            arrays[p + "noise_var"] = promp.noise_var
            arrays[p + "durations"] = promp.durations
            arrays[p + "coupled"] = np.array(bool(promp.coupled))
            if promp.structured:
                arrays[p + "low_rank"], arrays[p + "block_var"] = promp.structure()
            else:
                arrays[p + "dense_cov"] = promp.weight_cov
            if promp.signal_names is not None:
                arrays[p + "signal_names"] = np.array(promp.signal_names, dtype=str)
            if promp.group_var is not None:
                arrays[p + "group_var"] = promp.group_var
        import secrets
        import stat

        target = os.path.realpath(path)
        folder, name = os.path.split(target)
        # Hidden, and unique to this call (O_EXCL): two trainings into one folder, or a
        # temporary file left by a killed one, never share it.
        partial = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.partial")
        made = False
        try:
            # Mode 0o666 less the umask, as a file open()ed anew: the library is not private.
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            made = True
            with os.fdopen(fd, "wb") as f:
                if os.path.exists(target):
                    os.fchmod(f.fileno(), stat.S_IMODE(os.stat(target).st_mode))
                np.savez(f, **arrays)     # a file object: savez appends no .npz to it
                f.flush()
                os.fsync(f.fileno())      # on disk before the rename: a crash leaves one file or the other
            os.replace(partial, target)
        except BaseException as exc:
            if made:
                try:
                    os.unlink(partial)
                except OSError:
                    pass                   # renamed already, or gone: the error that matters is exc
            if isinstance(exc, OSError):
                raise OSError(exc.errno, f"cannot write the task library ({exc.strerror or exc})",
                              os.fspath(path)) from exc
            raise

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "TaskLibrary":
        """Read a library written by :meth:`save`.

        Raises:
            LibraryFormatError: (one line naming ``path`` and what is wrong) for anything
                else: no such file, a named pipe or a device, not a readable .npz (empty,
                truncated, a corrupt member, a single .npy array), not a task library, a
                missing or malformed field, another format version, or a model that fails
                :class:`ProMP`'s checks (shapes, NaN / inf values, variances <= 0).
        """
        _refuse_special_file(path)
        try:
            with open(path, "rb") as file:
                magic = file.read(6)
            data = np.load(path, allow_pickle=False)
        except (FileNotFoundError, IsADirectoryError) as exc:   # not "not a library": there is no file
            raise LibraryFormatError(f"{path}: {exc.strerror.lower() if exc.strerror else exc}") from exc
        except ValueError as exc:
            if magic.startswith((b"PK", b"\x93NUMPY")):
                raise LibraryFormatError(f"{path}: not a ProMP task library "
                                         f"(cannot read as .npz: {_reason(exc)})") from exc
            # Neither a zip nor a .npy file: np.load then tries it as a pickle and says so
            # ("contains pickled (object) data ... allow_pickle"), which misleads.
            raise LibraryFormatError(f"{path}: not a ProMP task library (not an .npz archive)") from exc
        except (OSError, EOFError, zipfile.BadZipFile) as exc:
            raise LibraryFormatError(f"{path}: not a ProMP task library (cannot read as .npz: {_reason(exc)})") from exc
        if not isinstance(data, np.lib.npyio.NpzFile):
            # np.load gives a plain array for a .npy file (and has closed it already).
            raise LibraryFormatError(f"{path}: not a ProMP task library (a single .npy array, not an .npz archive)")
        with data:
            try:
                return cls._read(_CheckedMembers(data, path), path)
            except LibraryFormatError:
                raise
            except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError) as exc:
                # A member that fails its CRC or ends early, or is stored with a compression
                # method zipfile cannot read (NotImplementedError): the archive was damaged.
                raise LibraryFormatError(f"{path}: corrupt task library ({_reason(exc)})") from exc

    @classmethod
    def _read(cls, data: "_CheckedMembers", path: str | os.PathLike[str]) -> "TaskLibrary":
        """The library in an opened .npz (see :meth:`load`)."""
        if "format" not in data or str(data["format"]) != FORMAT_NAME:
            raise LibraryFormatError(f"{path}: not a ProMP task library (no '{FORMAT_NAME}' format field)")
        if "version" not in data:
            raise LibraryFormatError(f"{path}: task library has no format version field; re-learn the library "
                                     "from its demonstrations")
        stored = data["version"]
        if stored.shape != () or stored.dtype.kind not in "iu":
            raise LibraryFormatError(f"{path}: task library format version is not an integer: {stored.tolist()!r}")
        version = int(stored)
        if version > FORMAT_VERSION:
            raise LibraryFormatError(
                f"{path}: task library format version {version} comes from a newer release, this code "
                f"reads version {FORMAT_VERSION}; upgrade prescient-teleop to load it")
        if version != FORMAT_VERSION:
            raise LibraryFormatError(
                f"{path}: task library format version {version}, this code reads version "
                f"{FORMAT_VERSION}; re-learn the library from its demonstrations")
        if "labels" not in data:
            raise LibraryFormatError(f"{path}: task library has no 'labels' field")
        labels = data["labels"]
        if labels.ndim != 1:
            raise LibraryFormatError(f"{path}: task library 'labels' must be a list of labels, "
                                     f"got shape {labels.shape}")
        names = [str(label) for label in labels]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            # Loaded, the later task silently replaced the earlier one of the same label.
            raise LibraryFormatError(f"{path}: task library labels repeat: {', '.join(map(repr, repeated))}")
        unlabelled = sorted({key.split("/", 1)[0] for key in data.keys() if _task_index(key) >= len(names)},
                            key=_task_index)
        if unlabelled:
            # A shortened labels field loaded the first tasks without a word about the rest.
            raise LibraryFormatError(f"{path}: task library holds task fields {', '.join(unlabelled)} beyond its "
                                     f"{len(names)} labels")
        lib = cls(metadata=_read_metadata(data, path))
        for i, label in enumerate(labels):
            label, p = str(label), f"t{i}/"
            try:
                try:
                    spec = json.loads(str(data[p + "basis"]))
                except RecursionError:
                    raise ValueError("basis JSON is nested too deeply") from None
                weight_mean = data[p + "weight_mean"]
                # Check the basis size against the stored weights before building the basis:
                # a huge n_basis would otherwise allocate (or loop over) that many centres.
                if weight_mean.ndim != 2:
                    raise ValueError(f"weight_mean must be 2-D (signals, basis functions), "
                                     f"got shape {weight_mean.shape}")
                if isinstance(spec, dict) and "n_basis" in spec and spec["n_basis"] != weight_mean.shape[1]:
                    raise ValueError(f"basis n_basis {spec['n_basis']!r} does not match "
                                     f"weight_mean shape {weight_mean.shape}")
                coupled = data[p + "coupled"]
                if coupled.shape != () or coupled.dtype != bool:
                    raise ValueError(f"coupled must be a boolean, got {coupled.tolist()!r}")   # bool("False") is True
                kw: dict[str, Any] = dict(
                    basis=RBFBasis.from_dict(spec), weight_mean=_real(weight_mean, "weight_mean"),
                    noise_var=_real(data[p + "noise_var"], "noise_var"),
                    durations=_real(data[p + "durations"], "durations"), coupled=bool(coupled), label=label)
                if p + "low_rank" in data:
                    kw.update(low_rank=_real(data[p + "low_rank"], "low_rank"),
                              block_var=_real(data[p + "block_var"], "block_var"))
                else:
                    kw.update(dense_cov=_covariance(_real(data[p + "dense_cov"], "dense_cov")))
                if p + "signal_names" in data:
                    kw.update(signal_names=tuple(str(s) for s in data[p + "signal_names"]))
                if p + "group_var" in data:
                    kw.update(group_var=_real(data[p + "group_var"], "group_var"))
                lib.add(label, ProMP(**kw))
            except LibraryFormatError:
                raise
            except KeyError as exc:
                raise LibraryFormatError(f"{path}: task {label!r} is incomplete ({_reason(exc)})") from exc
            except (TypeError, ValueError) as exc:
                # Malformed fields (bad JSON, shapes, NaN, object arrays) and ProMP's checks.
                raise LibraryFormatError(f"{path}: task {label!r} is malformed ({_reason(exc)})") from exc
        return lib


def _string_mapping(value: Any, what: str) -> dict[str, str]:
    """``value`` as a dict of strings; ValueError if it is anything else."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"{what} must map strings to strings, got {value!r}")
    return dict(value)


def _read_metadata(data: "_CheckedMembers", path: str | os.PathLike[str]) -> dict[str, str]:
    """The optional ``metadata`` field ({} without one)."""
    if "metadata" not in data:
        return {}
    field = data["metadata"]
    try:
        if field.shape != () or field.dtype.kind != "U":
            raise ValueError(f"not a JSON string: {field.dtype} of shape {field.shape}")
        return _string_mapping(json.loads(str(field)), "metadata")
    except (ValueError, RecursionError) as exc:
        raise LibraryFormatError(f"{path}: task library 'metadata' is malformed ({_reason(exc)})") from None


class _CheckedMembers:
    """Read access to an opened .npz that refuses a member whose .npy header declares more
    data than the member holds, before numpy allocates the declared array."""

    # A library TaskLibrary.save wrote is stored (ratio 1), and the same library recompressed
    # (np.savez_compressed) gains at most 5.2:1, on its label strings; deflate reaches ~1030:1
    # on zeros, and a bound at that (it was 1100) let an 825 kB file claim 900 MB. A member
    # over a megabyte that claims more than 50:1 is refused.
    _MAX_RATIO = 50
    _RATIO_CHECKED_FROM = 1 << 20

    def __init__(self, data: np.lib.npyio.NpzFile, path: str | os.PathLike[str]) -> None:
        self._data, self._path = data, path

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def keys(self) -> list[str]:
        """The members' names (without .npy)."""
        return list(self._data.files)

    def __getitem__(self, key: str) -> npt.NDArray[Any]:
        self._check_size(key)
        return self._data[key]

    def _check_size(self, key: str) -> None:
        zf = self._data.zip
        if zf is None:                                # closed (not while load reads it)
            raise ValueError("the archive is closed")
        names = set(zf.namelist())
        name = key + ".npy" if key + ".npy" in names else key
        if name not in names:
            return                                    # KeyError from NpzFile below
        info = zf.getinfo(name)
        if info.file_size > max(self._RATIO_CHECKED_FROM, max(info.compress_size, 1) * self._MAX_RATIO):
            raise LibraryFormatError(
                f"{self._path}: corrupt task library (member {name!r} declares {info.file_size} bytes "
                f"uncompressed from {info.compress_size} compressed)")
        with zf.open(name) as f:
            try:
                header = _read_npy_header(f)
            except ValueError:
                return                                # not a readable .npy header: left to np.load
        if header is None:
            return                                    # other versions: left to np.load
        shape, dtype = header
        declared = dtype.itemsize
        for n in shape:
            declared *= int(n)
        if declared > info.file_size:
            raise LibraryFormatError(
                f"{self._path}: corrupt task library (member {name!r} declares shape {shape} "
                f"({declared} bytes) but holds {info.file_size} bytes)")


def _read_npy_header(f: IO[bytes]) -> tuple[tuple[int, ...], np.dtype[Any]] | None:
    """(shape, dtype) declared by the .npy header at the start of ``f``; None for a format
    version other than 1.0 and 2.0, ValueError for a header that cannot be read.

    numpy's header readers are cast to their signatures: numpy < 2.3 ships them unannotated."""
    version = cast(Callable[[IO[bytes]], tuple[int, int]], np.lib.format.read_magic)(f)
    if version == (1, 0):
        read_header = np.lib.format.read_array_header_1_0
    elif version == (2, 0):
        read_header = np.lib.format.read_array_header_2_0
    else:
        return None
    shape, _, dtype = cast(Callable[[IO[bytes]], tuple[tuple[int, ...], bool, np.dtype[Any]]], read_header)(f)
    return shape, dtype


def _task_index(key: str) -> int:
    """i of a member ``t{i}/...`` (a task's field), else -1."""
    head, sep, _ = key.partition("/")
    return int(head[1:]) if sep and head[:1] == "t" and head[1:].isdigit() else -1


def _real(array: npt.NDArray[Any], name: str) -> npt.NDArray[Any]:
    """``array`` if it holds real numbers; ValueError otherwise (complex weights lost their
    imaginary part with a ComplexWarning, strings failed deep in numpy)."""
    if array.dtype.kind not in "fiu":
        raise ValueError(f"{name} must hold real numbers, got dtype {array.dtype}")
    return array


def _covariance(cov: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``cov`` if it is a square, symmetric, positive semi-definite matrix (to rounding);
    ValueError otherwise (a negative one gave negative variances)."""
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(f"dense_cov must be a square matrix, got shape {cov.shape}")
    if not np.all(np.isfinite(cov)):
        raise ValueError("dense_cov must be finite")
    scale = max(float(np.max(np.abs(cov))), np.finfo(float).tiny)
    if not np.allclose(cov, cov.T, rtol=0.0, atol=1e-9 * scale):
        raise ValueError("dense_cov must be symmetric")
    if float(np.linalg.eigvalsh(cov).min()) < -1e-9 * scale:
        raise ValueError("dense_cov must be positive semi-definite")
    return cov


#: What a special file is, said in a message (see :func:`_refuse_special_file`).
_SPECIAL_KINDS = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
                  (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _refuse_special_file(path: str | os.PathLike[str]) -> None:
    """Raise :class:`LibraryFormatError` if ``path`` is a named pipe, a device or a socket; a
    regular file, a folder or a missing path is left to :meth:`TaskLibrary.load`'s open.

    (retarget.file_checks has the same check for the other readers; promp imports neither
    retarget nor teleop.)"""
    try:
        mode = os.stat(path).st_mode      # stat does not block on a named pipe; open waits for a writer
    except (OSError, ValueError):
        return
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        kind = next((name for test, name in _SPECIAL_KINDS if test(mode)), "a special file")
        raise LibraryFormatError(f"{os.fspath(path)}: not a regular file ({kind})")


def _reason(exc: BaseException) -> str:
    """One line for ``exc`` (a KeyError's message without the repr quotes)."""
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return " ".join(str(exc).split()) or type(exc).__name__
