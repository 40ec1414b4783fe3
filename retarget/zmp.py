"""ZMP-feasible CoM references from the linear inverted pendulum (thesis §2.2.4, Eq. 2.15).

Per control step (period delta), with the robot's MEASURED CoM position x^m, velocity
v^m and height h^m, the LIP (Eq. 2.14, x_ZMP = x - x_ddot h / g) with an Euler step links
the next CoM velocity to the ZMP:

    v = v^m + (delta g / h^m) (x^m - z)                                  (constraint of 2.15)

Eq. 2.15 picks the ZMP z inside the support polygon whose velocity is closest to the
desired one, min (v_des - v)^2. Its closed form (reference [NOTE]) per axis is

    z* = clip(x^m - (h^m / (delta g)) (v_des - v^m), z_min, z_max),
    v* = v^m + (delta g / h^m) (x^m - z*).

Because v is affine in z with the same gain on both axes, the 2-D problem
min |v_des - v|^2 s.t. z in P is the Euclidean projection of the unconstrained ZMP onto P.
:class:`ZmpCorrector` does exactly that on the convex hull of the active sole corners,
shrunk by a safety margin (``bounds="polygon"``, default; correct for rotated feet and for
single support). ``bounds="box"`` is the thesis' per-axis form: independent intervals from
the axis-aligned bounding box of the shrunk polygon (express the polygon in a frame
aligned with the feet before calling, or the box may admit ZMPs outside the polygon);
with the capture-point safeguard the intervals are the bounding box of box and capture
region intersected, so the safeguard only holds approximately there.

Capture-point safeguard (``capture_point=True``, default; an addition to the thesis). The
per-step problem is greedy: chasing a fast reference, it can accelerate the CoM so much
that no ZMP inside the polygon can stop it any more (the LIP diverges). The corrector
therefore also keeps the next *capture point* xi = x + v / omega (omega = sqrt(g / h),
Eq. 2.14's eta) inside the shrunk polygon: with x_next = x^m + delta v and v = v*(z)
this is one more convex polygon of admissible ZMPs (an affine, point-reflected copy of
the support polygon), intersected with the polygon before projecting. If the
intersection is empty (the measured state is already beyond recovery) the ZMP is placed
to bring the capture point as close as possible to the polygon's centre. With
``capture_point=False`` and ``recovery_time=math.inf`` (no recovery term, below) the
corrector is the literal Eq. 2.15.

Resolved gaps of the thesis (reference §3.1 [GAP]):

* x_CoM in the constraint is the MEASURED CoM: the ZMP is a property of the robot's actual
  state.
* delta is the constructor's ``dt`` (the control period, 0.01 s at 100 Hz).
* The corrected reference is integrated from the previous corrected reference,
  x_c <- x_c + delta v*, and the desired velocity adds a recovery term to the retargeted
  velocity: v_des = v_ref + lambda (x_ref - (x_c + delta v_ref)) / delta with
  lambda = min(1, delta / recovery_time). Without it (the literal thesis) a saturated step
  leaves a permanent offset between the corrected and the retargeted CoM. When the ZMP
  constraint is inactive and the reference is consistent (x_ref advancing by
  delta v_ref), the output equals the reference: it passes through.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .polygon import clip, convex_hull, halfplanes, project, shrink

GRAVITY = 9.81


def zmp_axis_closed_form(x_meas: npt.ArrayLike, v_des: npt.ArrayLike, v_meas: npt.ArrayLike, height: float,
                         dt: float, z_min: npt.ArrayLike, z_max: npt.ArrayLike,
                         gravity: float = GRAVITY
                         ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
    """Eq. 2.15 closed form on one axis (vectorised over any arrays).

    Args: x_meas [m], v_des and v_meas [m/s], height h^m [m], dt delta [s], z_min and
    z_max the ZMP bounds [m], gravity [m/s^2].

    Returns:
        (z*, v*): the chosen ZMP [m] and the resulting CoM velocity [m/s].
    """
    k = dt * gravity / height
    z = np.clip(np.asarray(x_meas) - (np.asarray(v_des) - np.asarray(v_meas)) / k, z_min, z_max)
    return z, np.asarray(v_meas) + k * (np.asarray(x_meas) - z)


class ShrunkHull:
    """The convex hull of a support polygon's points shrunk by a fixed margin [m], cached
    until the points change (the feet are usually still, and the hull is recomputed only
    when they move)."""

    def __init__(self, margin: float) -> None:
        self.margin = float(margin)
        self._key: bytes | None = None
        self._hull: npt.NDArray[np.floating[Any]] | None = None

    def __call__(self, support_polygon: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
        """(K, 2) shrunk hull of the (N, 2+) support points [m].

        Raises:
            ValueError: points of the wrong shape, not finite, or spanning no area (fewer
                than three points off one line): no ZMP can be placed in them.
        """
        pts = np.asarray(support_polygon, dtype=float)
        if pts.ndim != 2 or pts.shape[1] < 2:
            raise ValueError(f"support polygon must be (K, 2) or (K, 3) points [m], got shape {pts.shape}")
        pts = pts[:, :2]
        key = pts.tobytes()
        if key != self._key:
            if not np.all(np.isfinite(pts)):
                raise ValueError("support polygon: its points are not finite (NaN or inf)")
            hull = convex_hull(pts)
            if len(hull) < 3:
                raise ValueError(f"support polygon of {len(pts)} point(s) has no area (a point or a line): "
                                 "no ZMP can be placed in it")
            self._hull = shrink(hull, self.margin)
            self._key = key
        assert self._hull is not None             # set together with _key, which now matches
        return self._hull


def _finite(name: str, value: npt.ArrayLike, size: int) -> npt.NDArray[np.floating[Any]]:
    """The first ``size`` values of ``value`` as floats; ValueError naming ``name`` if there
    are fewer or any is NaN or infinite (a NaN would stay in a filter's state for good)."""
    a: npt.NDArray[np.floating[Any]] = np.asarray(value, dtype=float).reshape(-1)
    if a.size < size:
        raise ValueError(f"{name} must have {size} values, got {a.size}")
    a = a[:size]
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} is not finite: {a.tolist()}")
    return a


class ZmpCorrector:
    """Stateful CoM-reference pre-processor (one per robot, stepped every control period).

    Args:
        dt: control period delta [s].
        margin: distance kept between the ZMP and the support polygon's edges [m].
        recovery_time: time constant [s] with which the corrected reference returns to the
            retargeted one after the constraint released it (see module docstring). The
            default 0.2 s brings an iCub-sized CoM (h = 0.5 m) 6 cm across in under 1 s
            without overshoot; shorter times overshoot (and, without the capture-point
            safeguard, diverge). ``math.inf``: no recovery term (the literal thesis); 0: the
            whole offset in one step.
        bounds: "polygon" (projection on the convex polygon) or "box" (per-axis intervals).
        gravity: [m/s^2].
        min_height: lower bound on the measured CoM height used in the model [m] (guards
            against a corrupt measurement dividing by ~0).
        capture_point: keep the next capture point inside the polygon too (see module
            docstring); False (with ``recovery_time=math.inf``) gives the literal Eq. 2.15.
        capture_margin: the capture point is kept inside the polygon shrunk by this [m]
            (default: ``margin``); a larger value keeps the CoM itself further inside.

    Attributes (after a step): ``zmp`` (2,) the chosen ZMP [m], ``saturated`` whether the
    constraint was active, ``com_velocity`` (2,) the corrected velocity v* [m/s].
    """

    def __init__(self, dt: float = 0.01, margin: float = 0.01, recovery_time: float = 0.2,
                 bounds: str = "polygon", gravity: float = GRAVITY, min_height: float = 0.05,
                 capture_point: bool = True, capture_margin: float | None = None) -> None:
        if not (np.isfinite(dt) and dt > 0):
            raise ValueError(f"dt must be a positive number of seconds, got {dt}")
        for name, value in (("margin", margin), ("capture_margin", 0.0 if capture_margin is None else capture_margin)):
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a distance >= 0 [m], got {value}")
        if not recovery_time >= 0:
            raise ValueError(f"recovery_time must be >= 0 [s], got {recovery_time}")
        for name, value in (("gravity", gravity), ("min_height", min_height)):
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be positive, got {value}")
        if bounds not in ("polygon", "box"):
            raise ValueError(f"bounds must be 'polygon' or 'box', got {bounds!r}")
        self.dt = float(dt)
        self.margin = float(margin)
        self.recovery = min(1.0, self.dt / recovery_time) if recovery_time > 0 else 1.0
        self.bounds = bounds
        self.gravity = float(gravity)
        self.min_height = float(min_height)
        self.capture_point = bool(capture_point)
        self.capture_margin = self.margin if capture_margin is None else float(capture_margin)
        self.com: npt.NDArray[np.floating[Any]] | None = None
        self.zmp = np.full(2, np.nan)
        self.com_velocity = np.zeros(2)
        self.saturated = False
        self._feasible = ShrunkHull(self.margin)
        self._capture = self._feasible if self.capture_margin == self.margin else ShrunkHull(self.capture_margin)

    def reset(self, com_xy: npt.NDArray[np.floating[Any]] | None = None) -> None:
        """Forget the state; the next step starts from ``com_xy`` (default: the measured CoM)."""
        self.com = None if com_xy is None else np.array(com_xy, dtype=float)
        self.saturated = False
        self.zmp = np.full(2, np.nan)

    def feasible_region(self, support_polygon: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
        """(K, 2) the convex hull of the support points shrunk by the margin (cached)."""
        return self._feasible(support_polygon)

    def step(self, com_ref_xy: npt.NDArray[np.floating[Any]], com_ref_vel_xy: npt.NDArray[np.floating[Any]],
             measured_com: npt.NDArray[np.floating[Any]], measured_com_vel: npt.NDArray[np.floating[Any]],
             support_polygon: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
        """One control step -> corrected CoM ground reference (2,) [m].

        Args:
            com_ref_xy: (2,) retargeted CoM ground projection x_ref [m].
            com_ref_vel_xy: (2,) its velocity v_ref [m/s].
            measured_com: (3,) robot CoM x^m, with its height above the ground [m].
            measured_com_vel: (3,) robot CoM velocity v^m [m/s] (z ignored).
            support_polygon: (K, 2) or (K, 3) corners of the soles in contact [m], same
                ground frame as the CoM.

        Raises:
            ValueError: a non-finite input, or a support polygon of no area (the state is
                left as it was).
        """
        x_ref = _finite("com_ref_xy", com_ref_xy, 2)
        v_ref = _finite("com_ref_vel_xy", com_ref_vel_xy, 2)
        x_m = _finite("measured_com", measured_com, 3)
        v_m = _finite("measured_com_vel", measured_com_vel, 2)
        region = self.feasible_region(support_polygon)
        height = max(float(x_m[2]), self.min_height)
        if self.com is None:
            self.com = x_m[:2].copy()
        dt = self.dt
        v_des = v_ref + self.recovery * (x_ref - (self.com + dt * v_ref)) / dt
        k = dt * self.gravity / height
        z_free = x_m[:2] - (v_des - v_m) / k
        if self.bounds == "box":
            region = _box(region.min(axis=0), region.max(axis=0))
        if self.capture_point:
            region = self._capture_region(region, x_m[:2], v_m, k, height, self._capture_polygon(support_polygon))
        if self.bounds == "box":
            z = np.clip(z_free, region.min(axis=0), region.max(axis=0))
        else:
            z = project(region, z_free)
        self.saturated = bool(np.any(np.abs(z - z_free) > 1e-12))
        self.zmp = z
        self.com_velocity = v_m + k * (x_m[:2] - z)
        self.com = self.com + dt * self.com_velocity
        return self.com.copy()

    def _capture_polygon(self, support_polygon: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
        """(K, 2) where the capture point must stay: the hull shrunk by ``capture_margin``."""
        return self._capture(support_polygon)

    def _capture_region(self, region: npt.NDArray[np.floating[Any]], x_m: npt.NDArray[np.floating[Any]],
                        v_m: npt.NDArray[np.floating[Any]], k: float, height: float,
                        capture: npt.NDArray[np.floating[Any]] | None = None) -> npt.NDArray[np.floating[Any]]:
        """ZMPs of ``region`` whose next capture point stays in ``capture`` (default:
        ``region``; see docstring).

        xi_next = x_m + T v(z), v(z) = v_m + k (x_m - z), T = dt + 1/omega. For each edge
        n.p <= b of the region: n.xi_next <= b  <=>  -n.z <= (b - n.(x_m + T v_m)) / (k T) - n.x_m.
        """
        capture = region if capture is None else capture
        if len(region) < 3 or len(capture) < 3:
            return region
        t = self.dt + np.sqrt(height / self.gravity)
        n, b = halfplanes(capture)
        offsets = (b - n @ (x_m + t * v_m)) / (k * t) - n @ x_m
        admissible = clip(region, -n, offsets)
        if len(admissible) >= 1:
            return admissible
        # Beyond recovery: aim the capture point at the region's centre, as far as the
        # region allows.
        centre = capture.mean(axis=0)
        z_centre = x_m + (x_m + t * v_m - centre) / (k * t)
        return project(region, z_centre)[None]


def _box(lo: npt.NDArray[np.floating[Any]], hi: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """(4, 2) counter-clockwise rectangle."""
    return np.array([[lo[0], lo[1]], [hi[0], lo[1]], [hi[0], hi[1]], [lo[0], hi[1]]])


class BoundedSmoother:
    """Critically damped second-order reference filter with bounded acceleration and jerk.

    s'' = w^2 (r - s) - 2 w s', with ||s''|| <= ``max_acceleration`` [unit/s^2] and
    ||s''(k) - s''(k-1)|| <= ``max_jerk`` * dt, integrated by semi-implicit Euler (stable for
    w dt < 1). Works on vectors of any size n; the bounds apply to their Euclidean norm.

    Args:
        dt: period [s]; frequency: w [rad/s]; max_acceleration, max_jerk: the bounds.
    """

    def __init__(self, dt: float, frequency: float, max_acceleration: float, max_jerk: float) -> None:
        if dt <= 0 or frequency <= 0 or max_acceleration <= 0 or max_jerk <= 0:
            raise ValueError("dt, frequency, max_acceleration and max_jerk must be positive")
        self.dt, self.frequency = float(dt), float(frequency)
        self.max_acceleration, self.max_jerk = float(max_acceleration), float(max_jerk)
        self._state: tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]],
                           npt.NDArray[np.floating[Any]]] | None = None

    def reset(self) -> None:
        """Start again from the next reference, at rest."""
        self._state = None

    def step(self, reference: npt.NDArray[np.floating[Any]]
             ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
        """(position (n,), velocity (n,)) of the filtered reference after one period."""
        ref = np.asarray(reference, dtype=float)
        w, dt = self.frequency, self.dt
        pos, vel, acc_prev = (self._state if self._state is not None
                              else (ref.copy(), np.zeros_like(ref), np.zeros_like(ref)))
        acc = w * w * (ref - pos) - 2.0 * w * vel
        change = acc - acc_prev
        norm = float(np.linalg.norm(change))
        if norm > self.max_jerk * dt:
            acc = acc_prev + change * (self.max_jerk * dt / norm)
        norm = float(np.linalg.norm(acc))
        if norm > self.max_acceleration:
            acc = acc * (self.max_acceleration / norm)
        vel = vel + dt * acc
        pos = pos + dt * vel
        self._state = (pos, vel, acc)
        return pos.copy(), vel.copy()


class ZmpPrefilter:
    """Eq. 2.15 run as a pure pre-filter of the CoM reference (no feedback from the robot).

    The corrector is stepped on its own corrected state (position and velocity of the
    corrected CoM reference) at a given CoM height, so the reference the controller
    receives has its LIP ZMP inside the support polygon shrunk by ``margin``. Feeding the
    robot's measured or commanded CoM back instead closes a positive feedback loop around a
    position-controlled robot (see teleop/stations/robot_station.py for the measurements).

    Two additions to the thesis keep a position-controlled robot on flat feet (both
    measured on the HDM05 takes, see ``tools/eval_retarget_execute.py``):

    * ``com_margin``: the retargeted CoM is first projected into the polygon shrunk by this
      margin [m]. The robot cannot step, so a human CoM that leaves the feet (HDM05
      depositFloorR: up to 1.4 m sideways once mapped, the performer steps) must not pin
      the robot's CoM near an edge: with a compliant sole contact a CoM 3 cm inside the
      outer edge already rolled the robot onto that edge, where an open-loop position
      controller leaves it.
    * ``smoothing_frequency`` / ``max_acceleration`` / ``max_jerk``: the clamped
      reference then goes through a critically damped second-order filter,
      s'' = w^2 (r - s) - 2 w s', with s'' changing by at most ``max_jerk`` [m/s^3] and
      bounded by ``max_acceleration`` [m/s^2]: its LIP ZMP stays within
      max_acceleration * h / g of the CoM (2.8 cm at 0.5 m/s^2, h = 0.55 m) and moves at
      most max_jerk * h / g per second (0.28 m/s at 5 m/s^3). Eq. 2.15 alone is greedy
      (bang-bang): chasing the reference it swung the ZMP from one side of the polygon to
      the other within 3 ticks (-0.069 -> +0.057 m, depositFloorR bd 001) when the
      capture-point safeguard had to brake, and the compliant robot overshot such swings
      by 2-3 cm, onto the soles' edges. Eq. 2.15 then only acts as the safety net.
      (A slew limit on Eq. 2.15's own ZMP was tried first: its lag made the greedy law
      overshoot until the capture-point safeguard forced a jump, the very thing to avoid.)
    * :meth:`waist_height`: the waist height reference through the same filter, its
      vertical acceleration bounded by ``waist_max_acceleration`` (2 m/s^2: the feet carry
      m (g +- 2) N, and the LIP's constant-height assumption holds to 20 %). Tracked raw, a
      fast rise from a deep squat (HDM05 squat1Reps bk 016: 0.9 m/s, and the waist range
      clamp turning a moving reference into a still one and back) decelerated the trunk
      at 12 m/s^2 > g: the robot left the ground for 80 ms and landed on its heel edges
      (CoP 16 mm outside the soles' polygon, feet slid 18 mm).

    Args:
        dt: control period [s].
        margin: distance kept between the LIP ZMP and the polygon edges [m].
        com_margin: distance kept between the CoM reference and the polygon edges [m]
            (0: the thesis' unclamped offsets).
        smoothing_frequency: w of the smoothing filter [rad/s] (None: no smoothing, the
            literal Eq. 2.15).
        max_acceleration: bound of the smoothed reference's acceleration [m/s^2].
        max_jerk: bound of its rate of change [m/s^3].
        waist_frequency, waist_max_acceleration, waist_max_jerk: the same filter for the
            waist height (:meth:`waist_height`) [rad/s], [m/s^2], [m/s^3].
    """

    def __init__(self, dt: float = 0.01, margin: float = 0.04, com_margin: float = 0.06,
                 smoothing_frequency: float | None = 4.0, max_acceleration: float = 0.5,
                 max_jerk: float = 5.0, waist_frequency: float = 8.0, waist_max_acceleration: float = 2.0,
                 waist_max_jerk: float = 40.0) -> None:
        if com_margin < 0:
            raise ValueError("com_margin must be >= 0")
        if (smoothing_frequency is not None and smoothing_frequency <= 0) or max_acceleration <= 0 or max_jerk <= 0:
            raise ValueError("smoothing_frequency, max_acceleration and max_jerk must be positive")
        self.smoothing_frequency = None if smoothing_frequency is None else float(smoothing_frequency)
        self.max_acceleration = float(max_acceleration)
        self.max_jerk = float(max_jerk)
        self._smoother = (None if smoothing_frequency is None else
                          BoundedSmoother(dt, smoothing_frequency, max_acceleration, max_jerk))
        self._waist = BoundedSmoother(dt, waist_frequency, waist_max_acceleration, waist_max_jerk)
        # (The capture point is kept ``margin`` inside, like the ZMP: keeping it inside
        # the CoM region instead made Eq. 2.15 brake hard whenever the smoothed reference
        # approached that region's edge, which is exactly the bang-bang to avoid.)
        self.corrector = ZmpCorrector(dt=dt, margin=margin)
        self.dt = float(dt)
        self.com_margin = float(com_margin)
        self._com_region = ShrunkHull(self.com_margin)
        self._state: tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]] | None = None
        self._prev_ref: npt.NDArray[np.floating[Any]] | None = None

    def reset(self) -> None:
        self.corrector.reset()
        self._state, self._prev_ref = None, None
        for smoother in (self._smoother, self._waist):
            if smoother is not None:
                smoother.reset()

    def com_region(self, support_polygon: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
        """(K, 2) where the CoM reference may go: the polygon shrunk by ``com_margin``."""
        return self._com_region(support_polygon)

    def step(self, com_ref_xy: npt.NDArray[np.floating[Any]], com_height: float,
             support_polygon: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
        """(2,) corrected CoM reference for the (2,) retargeted one [m], at CoM height
        ``com_height`` [m] above the (K, 2) or (K, 3) ``support_polygon`` points [m].

        Raises:
            ValueError: a non-finite reference, a CoM height that is not a positive length,
                or a support polygon of no area (the state is left as it was).
        """
        ref = _finite("com_ref_xy", com_ref_xy, 2)
        if not (np.isfinite(com_height) and com_height > 0):
            raise ValueError(f"com_height must be a positive length [m], got {com_height}")
        self.com_region(support_polygon)                  # checks the polygon first
        self.corrector.feasible_region(support_polygon)
        if self.com_margin > 0:
            ref = project(self.com_region(support_polygon), ref)
        if self._smoother is not None:
            ref, ref_vel = self._smoother.step(ref)
        else:
            ref_vel = np.zeros(2) if self._prev_ref is None else (ref - self._prev_ref) / self.dt
        self._prev_ref = ref.copy()
        pos, vel = self._state if self._state is not None else (ref, np.zeros(2))
        corrected = self.corrector.step(ref, ref_vel, np.array([pos[0], pos[1], com_height]),
                                        np.array([vel[0], vel[1], 0.0]), support_polygon)
        self._state = (corrected.copy(), self.corrector.com_velocity.copy())
        return corrected

    def waist_height(self, height: float, bounds: tuple[float, float] | None = None) -> float:
        """Smoothed waist height reference [m] for the retargeted one ``height`` [m],
        clamped to ``bounds`` (low, high) [m] first (the range the controller tracks)."""
        if not np.isfinite(height):
            raise ValueError(f"waist height must be finite [m], got {height}")
        target = float(height) if bounds is None else min(max(float(height), bounds[0]), bounds[1])
        return float(self._waist.step(np.array([target]))[0][0])
