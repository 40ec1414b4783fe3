"""The prepared-URDF cache under concurrent processes (``teleop tune --jobs``, parallel tests)."""

import multiprocessing
import os
import xml.etree.ElementTree as ET

import pytest


def _prepare_at(cache: str, barrier, results) -> None:
    os.environ["XDG_CACHE_HOME"] = cache
    from teleop.robot.description import load_description
    from teleop.sim.urdf_prep import prepare_urdf

    description = load_description("icub")
    barrier.wait(timeout=120)     # all processes write the same cache entry at once
    try:
        ET.parse(prepare_urdf(description.urdf_path, set(description.frames.values()), visual=False))
    except Exception as exc:      # noqa: BLE001 - the test reports what went wrong
        results.put(f"{type(exc).__name__}: {exc}")
        return
    results.put("ok")


def test_processes_preparing_the_same_urdf_at_once_all_read_a_whole_file(tmp_path):
    """Before each process wrote its own temporary file, 25 of 60 such processes crashed
    (one renamed another's file away) or parsed a truncated URDF. A barrier starts them
    together however long each takes to start (a fixed start time, 3 s ahead, was passed
    by slow starts on a loaded machine: no collision, nothing tested)."""
    context = multiprocessing.get_context("spawn")
    said = []
    for round_ in range(2):
        barrier, results = context.Barrier(4), context.Queue()
        processes = [context.Process(target=_prepare_at, args=(str(tmp_path / f"cache{round_}"), barrier, results))
                     for _ in range(4)]
        for process in processes:
            process.start()
        said += [results.get(timeout=180) for _ in processes]
        for process in processes:
            process.join(timeout=30)
    assert said == ["ok"] * 8


def test_a_cache_write_that_fails_names_the_cache_and_leaves_no_temporary(tmp_path, monkeypatch):
    """A full disk in the cache: `calibrate-sim` said only "[Errno 27] File too large" and
    left truncated `.tmp` files in ~/.cache/prescient-teleop/urdf."""
    import errno

    from teleop.sim.urdf_prep import write_cached

    def full(self, path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(b"<robot")           # cut short
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr(ET.ElementTree, "write", full)
    out = tmp_path / "model.urdf"
    with pytest.raises(OSError) as exc:
        write_cached(ET.ElementTree(ET.fromstring("<robot/>")), out)
    assert f"cache folder {tmp_path}" in str(exc.value) and exc.value.filename == str(out)
    assert list(tmp_path.iterdir()) == []


def _robot_package(root, mesh_bytes: bytes = b"solid m\nendsolid m\n"):
    """A minimal robot package under ``root``: robots/r/model.urdf whose link's mesh is a
    ``package://`` URI into meshes/ (the iCub's layout in icub-models)."""
    (root / "pkg" / "meshes").mkdir(parents=True)
    (root / "pkg" / "meshes" / "m.stl").write_bytes(mesh_bytes)
    urdf = root / "pkg" / "robots" / "r" / "model.urdf"
    urdf.parent.mkdir(parents=True)
    urdf.write_text('<robot name="r"><link name="base"><inertial><mass value="1"/>'
                    '<inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial>'
                    '<visual><geometry><mesh filename="package://pkg/meshes/m.stl"/></geometry></visual>'
                    '</link></robot>')
    return urdf


def test_the_same_urdf_installed_elsewhere_is_prepared_with_its_own_meshes(tmp_path, monkeypatch):
    """The cache was keyed by the URDF's content only: after a virtual environment was
    removed and made again at another path (a new clone, `make clean-venv`), every
    simulation loaded the cached copy whose meshes pointed into the removed one, and
    pybullet said only "Cannot load URDF file" (a fresh clone's `make demo` failed so)."""
    import shutil

    from teleop.sim.urdf_prep import prepare_urdf

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = prepare_urdf(_robot_package(tmp_path / "venv1"), set())
    assert str(tmp_path / "venv1") in first.read_text()
    shutil.rmtree(tmp_path / "venv1")
    second = prepare_urdf(_robot_package(tmp_path / "venv2"), set())
    meshes = [m.get("filename") for m in ET.parse(second).getroot().iter("mesh")]
    assert meshes == [str(tmp_path / "venv2" / "pkg" / "meshes" / "m.stl")]
    assert all(os.path.exists(m) for m in meshes)


def test_a_robot_model_whose_meshes_are_gone_names_a_missing_mesh(tmp_path, monkeypatch):
    """pybullet says only "Cannot load URDF file" when a mesh is missing: the simulation
    names the model and a missing mesh (a FileNotFoundError, which every command reports
    as one line, exit 1) and leaves no pybullet client connected."""
    import pybullet as pb

    import teleop.sim.simulator as simulator
    from teleop.robot.model import RobotModel

    real_prepare = simulator.prepare_urdf
    gone = tmp_path / "removed-venv" / "meshes" / "root_link.stl"

    def prepared_with_a_removed_mesh(*args, **kwargs):
        tree = ET.parse(real_prepare(*args, **kwargs))
        next(tree.getroot().iter("mesh")).set("filename", str(gone))
        out = tmp_path / "model.urdf"
        tree.write(out)
        return out

    monkeypatch.setattr(simulator, "prepare_urdf", prepared_with_a_removed_mesh)
    clients_before = [c for c in range(16) if pb.isConnected(c)]
    with pytest.raises(FileNotFoundError, match="1 mesh file.*not on disk") as exc:
        simulator.Simulation(RobotModel("icub"))
    assert str(gone) in str(exc.value) and str(tmp_path / "model.urdf") in str(exc.value)
    assert [c for c in range(16) if pb.isConnected(c)] == clients_before


def test_a_model_pybullet_refuses_for_another_reason_is_named_with_pybullets_words(tmp_path, monkeypatch):
    from teleop.sim.urdf_prep import load_failure, prepare_urdf

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    urdf = prepare_urdf(_robot_package(tmp_path), set())     # its meshes are there
    error = load_failure(urdf, RuntimeError("Cannot load URDF file."))
    assert isinstance(error, RuntimeError) and str(urdf) in str(error) and "Cannot load URDF file." in str(error)
    (tmp_path / "broken.urdf").write_text("<robot")
    assert "not a readable URDF" in str(load_failure(tmp_path / "broken.urdf", RuntimeError("x")))


def test_a_urdf_reached_through_a_symbolic_link_refers_to_its_real_meshes(tmp_path, monkeypatch):
    """The key was the resolved path but the meshes were found beside the link: after the
    link was removed (and the package reached through another), the cached copy pointed
    through the removed link."""
    from teleop.sim.urdf_prep import prepare_urdf

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    urdf = _robot_package(tmp_path / "real")
    (tmp_path / "site1").symlink_to(tmp_path / "real")
    prepare_urdf(tmp_path / "site1" / urdf.relative_to(tmp_path / "real"), set())
    (tmp_path / "site1").unlink()
    (tmp_path / "site2").symlink_to(tmp_path / "real")
    copy = prepare_urdf(tmp_path / "site2" / urdf.relative_to(tmp_path / "real"), set())
    meshes = [m.get("filename") for m in ET.parse(copy).getroot().iter("mesh")]
    assert meshes == [str(tmp_path / "real" / "pkg" / "meshes" / "m.stl")]


def test_a_cached_copy_whose_meshes_are_gone_is_not_reused(tmp_path, monkeypatch):
    """A package removed and reinstalled at the same path without a mesh: the cached copy was
    returned as it was, and pybullet failed on it later; now it is made again, and the
    missing mesh is named."""
    from teleop.sim.urdf_prep import prepare_urdf

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    urdf = _robot_package(tmp_path)
    prepare_urdf(urdf, set())
    (tmp_path / "pkg" / "meshes" / "m.stl").unlink()
    with pytest.raises(FileNotFoundError, match="cannot resolve mesh package://pkg/meshes/m.stl"):
        prepare_urdf(urdf, set())
    # A damaged copy (a cut-short write) is made again too.
    (tmp_path / "pkg" / "meshes" / "m.stl").write_bytes(b"solid m\nendsolid m\n")
    copy = prepare_urdf(urdf, set())
    copy.write_text("<robot")
    assert prepare_urdf(urdf, set()) == copy and ET.parse(copy).getroot().tag == "robot"


@pytest.mark.parametrize("where", ["preparing the model", "setting the robot up"])
def test_a_simulation_that_fails_to_start_leaves_no_pybullet_client(monkeypatch, where):
    """Before, a failure preparing the model file (after pybullet was connected) or anywhere
    after loading it left a connected client behind in the process."""
    import pybullet as pb

    import teleop.sim.simulator as simulator
    from teleop.robot.model import RobotModel

    def fail(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    if where == "preparing the model":
        monkeypatch.setattr(simulator, "prepare_urdf", fail)
    else:
        monkeypatch.setattr(simulator.Simulation, "_index_links_and_joints", fail)
    clients_before = [c for c in range(16) if pb.isConnected(c)]
    with pytest.raises(OSError, match="No space left"):
        simulator.Simulation(RobotModel("icub"))
    assert [c for c in range(16) if pb.isConnected(c)] == clients_before


def test_copies_unused_for_a_month_are_removed_when_a_new_one_is_made(tmp_path, monkeypatch):
    """Copies for removed environments (and keyed the old way) stayed in ~/.cache for ever;
    a copy in use is kept however old it was made."""
    import time

    from teleop.sim.urdf_prep import UNUSED_DAYS, cache_dir, prepare_urdf

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    used = prepare_urdf(_robot_package(tmp_path / "a"), set())
    stale, fresh, killed = (cache_dir() / name for name in ("old_0123.urdf", "new_4567.urdf", "x.urdf.1.2.tmp"))
    for path in (stale, fresh, killed):
        path.write_text("<robot/>")
    month_ago = time.time() - (UNUSED_DAYS + 1) * 86400
    for path in (stale, killed, used):
        os.utime(path, (month_ago, month_ago))
    assert prepare_urdf(tmp_path / "a" / "pkg" / "robots" / "r" / "model.urdf", set()) == used   # used: kept
    prepare_urdf(_robot_package(tmp_path / "b"), set())      # a new copy: the unused ones go
    assert sorted(p.name for p in cache_dir().iterdir() if p.name in {stale.name, fresh.name, killed.name}) == \
        [fresh.name]
    assert used.exists()


def test_a_urdf_linked_into_a_package_from_outside_finds_the_packages_meshes(tmp_path, monkeypatch):
    """A package whose model.urdf is a symbolic link to a file generated elsewhere: its
    package:// meshes are found above the link (as the viewer finds them), and written as
    real paths."""
    from teleop.sim.urdf_prep import prepare_urdf

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    urdf = _robot_package(tmp_path / "install")
    (tmp_path / "build").mkdir()
    urdf.rename(tmp_path / "build" / "model.urdf")
    urdf.symlink_to(tmp_path / "build" / "model.urdf")
    copy = prepare_urdf(urdf, set())
    meshes = [m.get("filename") for m in ET.parse(copy).getroot().iter("mesh")]
    assert meshes == [str(tmp_path / "install" / "pkg" / "meshes" / "m.stl")]


def test_a_cut_short_collision_free_copy_is_made_again(monkeypatch, tmp_path):
    """Calibration's collision-free copy was reused however it was: a cut-short one failed
    every such simulation until the cache was deleted by hand."""
    import teleop.sim.simulator as simulator
    from teleop.robot.model import RobotModel

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with simulator.Simulation(RobotModel("icub"), visual=False, fixed_base=True, collisions=False):
        pass
    (copy,) = (tmp_path / "cache" / "prescient-teleop" / "urdf").glob("nocollision_*.urdf")
    copy.write_text("<robot")
    with simulator.Simulation(RobotModel("icub"), visual=False, fixed_base=True, collisions=False) as sim:
        assert sim.robot.n_joints > 0
    assert ET.parse(copy).getroot().tag == "robot"


def test_jogs_collision_world_that_fails_to_start_leaves_no_pybullet_client(monkeypatch):
    """Before, only pybullet's refusal of the model disconnected; a failure after (adding the
    scene's obstacles) left the client connected."""
    import pybullet as pb

    import teleop.jog.collision as collision
    from teleop.robot.model import RobotModel

    def fail(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(collision, "add_to_simulation", fail)
    clients_before = [c for c in range(16) if pb.isConnected(c)]
    with pytest.raises(OSError, match="No space left"):
        collision.CollisionWorld(RobotModel("icub"), obstacles=[object()])  # type: ignore[list-item]
    assert [c for c in range(16) if pb.isConnected(c)] == clients_before
