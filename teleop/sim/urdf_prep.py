"""Prepare a URDF for pybullet so that simulator and model agree.

pybullet gives every link without an ``<inertial>`` a mass of 1 kg, and the iCub URDF has
~180 inertia-less frame links (skin patches, IMUs, DH frames): loaded as is, the simulated
robot would weigh ~200 kg instead of 33 kg. We therefore

* drop inertia-less leaf links (repeatedly) unless the product names them (soles, hands,
  eye parents...), which also makes the simulation faster;
* give the inertia-less links we keep a negligible mass (0.1 g), so the total mass stays
  within 0.1% of pinocchio's;
* rewrite ``package://`` mesh URIs to absolute paths, which pybullet cannot resolve itself.

The result is cached on disk, keyed by the source file's content, its location (the mesh
paths written into the copy are found from it) and the options. A copy not used for
:data:`UNUSED_DAYS` days (one for an environment since removed, or keyed the old way) is
removed when a new copy is made.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

#: Mass [kg] and principal inertia [kg m^2] given to kept inertia-less frame links.
FRAME_LINK_MASS = 1e-4
FRAME_LINK_INERTIA = 1e-9

#: Days after which a cached copy nobody used is removed.
UNUSED_DAYS = 30


def cache_dir() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    path = root / "prescient-teleop" / "urdf"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _resolve_package_uri(uri: str, urdf_path: Path) -> str:
    """Map a mesh URI (``package://<pkg>/rest``, or a path relative to the URDF) to an
    absolute path, finding ``<pkg>`` above the URDF as given, then above the file it is a
    symbolic link to (a link into a package, or out of one). The path found is resolved:
    a prepared copy must not reach its meshes through a link that may be removed."""
    given = Path(os.path.abspath(urdf_path))
    bases = list(dict.fromkeys([given, given.resolve()]))
    if not uri.startswith("package://"):
        if os.path.isabs(uri):
            return uri
        found = [base.parent / uri for base in bases if (base.parent / uri).exists()]
        return str((found[0] if found else given.parent / uri).resolve())   # a missing one: load_failure says
    package, _, rest = uri[len("package://"):].partition("/")
    for base in bases:
        for parent in base.parents:
            for candidate in (parent / package / rest, parent.parent / package / rest):
                if candidate.exists():
                    return str(candidate.resolve())
    raise FileNotFoundError(f"{urdf_path}: cannot resolve mesh {uri}")


def _is_massless(link: ET.Element) -> bool:
    inertial = link.find("inertial")
    if inertial is None:
        return True
    mass = inertial.find("mass")
    return mass is None or float(mass.get("value", "0")) <= 0.0


def _joint_link(joint: ET.Element, tag: str, urdf_path: Path) -> str | None:
    """The ``link`` of a joint's ``<parent>`` or ``<child>`` (a clear error if it has none)."""
    element = joint.find(tag)
    if element is None:
        raise ValueError(f"{urdf_path}: joint {joint.get('name')!r} has no <{tag}>")
    return element.get("link")


def prepare_urdf(urdf_path: Path, keep_links: set[str], visual: bool = True) -> Path:
    """Write (or reuse) a pybullet-ready copy of ``urdf_path``.

    Args:
        urdf_path: source URDF.
        keep_links: links that must survive pruning (frames the product uses).
        visual: keep visual meshes (False drops them: faster loading, no rendering).

    Returns:
        Path of the prepared URDF.
    """
    urdf_path = Path(os.path.abspath(urdf_path))
    source = urdf_path.read_bytes()
    # The location is part of the key, as given and as resolved (the meshes are found from
    # both): the copy holds absolute mesh paths found from it, and the same file installed
    # elsewhere (a virtual environment made again at another path) must not reuse a copy
    # whose meshes were removed with the old one.
    location = (str(urdf_path), str(urdf_path.resolve()))
    key = hashlib.sha256(source + repr((location, sorted(keep_links), visual, FRAME_LINK_MASS, 2)).encode()
                         ).hexdigest()[:16]
    out = cache_dir() / f"{urdf_path.parent.name}_{key}.urdf"
    if usable_copy(out):
        mark_used(out)
        return out
    prune_unused(out.parent)

    root = ET.fromstring(source)
    tree = ET.ElementTree(root)
    links = {link.get("name"): link for link in root.findall("link")}
    joints = root.findall("joint")
    # Prune inertia-less leaves until none is left to prune.
    while True:
        parents = {_joint_link(j, "parent", urdf_path) for j in joints}
        prunable = {name for name, link in links.items()
                    if name not in keep_links and name not in parents and _is_massless(link)
                    and link.find("visual") is None and link.find("collision") is None}
        if not prunable:
            break
        for name in prunable:
            root.remove(links.pop(name))
        for joint in [j for j in joints if _joint_link(j, "child", urdf_path) in prunable]:
            root.remove(joint)
            joints.remove(joint)

    for link in links.values():
        if _is_massless(link):
            for old in link.findall("inertial"):
                link.remove(old)
            inertial = ET.SubElement(link, "inertial")
            ET.SubElement(inertial, "origin", xyz="0 0 0", rpy="0 0 0")
            ET.SubElement(inertial, "mass", value=repr(FRAME_LINK_MASS))
            i = repr(FRAME_LINK_INERTIA)
            ET.SubElement(inertial, "inertia", ixx=i, ixy="0", ixz="0", iyy=i, iyz="0", izz=i)
        if not visual:
            for vis in link.findall("visual"):
                link.remove(vis)
    for mesh in root.iter("mesh"):
        filename = mesh.get("filename")
        if filename is None:
            raise ValueError(f"{urdf_path}: a <mesh> has no filename")
        mesh.set("filename", _resolve_package_uri(filename, urdf_path))
    # Gazebo plugins and sensors mean nothing to pybullet.
    for tag in ("gazebo", "sensor"):
        for element in root.findall(tag):
            root.remove(element)
    write_cached(tree, out)
    return out


def missing_meshes(urdf: Path) -> list[str]:
    """The mesh files ``urdf`` refers to that are not on disk (raises OSError or
    ET.ParseError for a file that is not a readable URDF)."""
    meshes = [m.get("filename") or "" for m in ET.parse(urdf).getroot().iter("mesh")]
    return [m for m in meshes if not os.path.exists(m)]


def mark_used(copy: Path) -> None:
    """Set a cached copy's modification time to now (its last use, which
    :func:`prune_unused` reads); a read-only cache is left as it is."""
    try:
        os.utime(copy)
    except OSError:
        pass


def prune_unused(folder: Path, days: float = UNUSED_DAYS) -> list[Path]:
    """Remove the cached copies (and temporaries of killed writers) in ``folder`` that were
    last used more than ``days`` ago; returns those removed. One another process removes
    first, or cannot remove, is left to it."""
    removed = []
    oldest = time.time() - days * 86400.0
    for path in [*folder.glob("*.urdf"), *folder.glob("*.tmp")]:
        try:
            if path.stat().st_mtime < oldest:
                path.unlink()
                removed.append(path)
        except OSError:
            pass
    return removed


def usable_copy(copy: Path) -> bool:
    """Whether a cached copy can be loaded as it is: a readable URDF whose meshes are all on
    disk (else it is made again: its package removed and reinstalled at the same path)."""
    try:
        return not missing_meshes(copy)
    except (OSError, ET.ParseError):
        return False


def load_failure(urdf: Path, error: Exception) -> Exception:
    """What to raise when pybullet could not load ``urdf`` (its ``pybullet.error`` says only
    "Cannot load URDF file"): a FileNotFoundError naming the first mesh the file refers to
    that is not on disk (meshes removed with the package that held them), else a
    RuntimeError naming the file and pybullet's words."""
    try:
        missing = missing_meshes(urdf)
    except (OSError, ET.ParseError) as exc:
        return RuntimeError(f"pybullet cannot load the robot model {urdf}: it is not a readable URDF ({exc})")
    if missing:
        return FileNotFoundError(f"the robot model {urdf} refers to {len(missing)} mesh file(s) that are not on "
                                 f"disk, e.g. {missing[0]}: reinstall the package that holds them")
    return RuntimeError(f"pybullet cannot load the robot model {urdf}: {error}")


def write_cached(tree: ET.ElementTree, out: Path) -> None:
    """Write ``tree`` to ``out`` in the cache: a temporary file of this process's and
    thread's own, then an atomic rename, so that concurrent processes (``teleop tune
    --jobs``, parallel tests) neither read a half-written file nor rename each other's. A
    failure (a full disk) removes the temporary and names the cache folder: it said only
    "[Errno 27] File too large" and left the truncated temporary there."""
    tmp = out.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tree.write(tmp)
        tmp.replace(out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, f"cannot write the simulator's robot model in its cache folder {out.parent} "
                                 f"({exc.strerror}; $XDG_CACHE_HOME moves it)", str(out)) from exc
