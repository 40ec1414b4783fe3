"""The synthetic operator: human-like whole-body task motions without recorded data.

So that the demo, the ProMP learning and the tests run on a fresh machine, this module
generates plausible whole-body demonstrations of a few manipulation tasks, as
:class:`retarget.human.HumanMotion` in the Xsens MVN convention (z up, x forward, y left,
metres, world_from_segment quaternions (w, x, y, z), segment frames world-aligned in the
N-pose, all 23 canonical segments, plus the centre of mass).

How a motion is made
--------------------
1. A *performer* (:class:`Performer`) fixes the body (height 1.55-1.95 m, sex for the mass
   table) and a movement style (tempo, amplitude, knee-vs-trunk strategy when bending,
   elbow posture, path curvature, gaze, sway and tremor levels).
2. A *task* lays out phases on a timeline (0.5-0.6 s still N-pose, the motion, 0.5-0.6 s still)
   and describes the motion as minimum-jerk (Flash & Hogan 1985) profiles of a few
   whole-body variables: pelvis lowering, pelvis/trunk flexion, lateral bend and
   rotation, clavicle elevation/protraction, hand targets in the world with a blend
   weight, relaxed arm postures, gaze target and a desired centre-of-mass shift.
   Task targets (where the hand goes) are solved on the final posture, so they are
   reachable at the arm extension the performer prefers.
3. :func:`~teleop.inputs.synthetic.body.realise` turns that description into joint rotations: analytic two-link IK
   places each hand on its target (elbow swivel from a posture-dependent pole) and each
   foot on its fixed ground position (so feet never slide), the pelvis height is capped
   so the legs can reach the ground, and a few fixed-point iterations move the pelvis
   horizontally until the centre of mass (de Leva 1996 masses) follows its desired
   ground path -- which keeps it inside the support polygon.
4. Forward kinematics of :class:`teleop.inputs.skeleton.Skeleton` gives segment poses.

Natural variability per trial (seeded): duration x0.75..1.35, phase proportions,
amplitudes, target positions, hand path curvature, left/right asymmetry and timing,
postural sway (0.1-0.6 Hz, ~2 mm of CoM), slow hand drift (~1.5 mm) and physiological
tremor (8-12 Hz, ~1 mm). The noise fades to zero over the first and last 0.25 s, so
every trial starts and ends exactly in the N-pose (and live trials chain seamlessly).

Public API
----------
``TASKS``, ``generate(task, seed, ...)``, ``generate_dataset(out_dir, n_per_task, seed, ...)``,
``Performer``, ``SyntheticOperator`` (a live, clocked source), ``VirtualClock``.

Modules: :mod:`.profiles` (minimum-jerk profiles, smooth noise), :mod:`.performer` (who
moves), :mod:`.body` (plans realised as joint rotations), :mod:`.tasks` (what each task
does), :mod:`.generate` (trials and data sets), :mod:`.operator` (the live source).
"""

from teleop.inputs.synthetic.body import Body, Plan, realise
from teleop.inputs.synthetic.generate import (
    COMPACT_POSITION_STEP,
    COMPACT_QUATERNION_STEP,
    generate,
    generate_dataset,
)
from teleop.inputs.synthetic.operator import WIND_DOWN_REST_S, SyntheticOperator, VirtualClock
from teleop.inputs.synthetic.performer import HEIGHT_RANGE_M, Performer
from teleop.inputs.synthetic.profiles import minimum_jerk
from teleop.inputs.synthetic.tasks import DURATION_FACTOR_RANGE, STILL_S, TASK_DESCRIPTIONS, TASKS

__all__ = [
    "COMPACT_POSITION_STEP", "COMPACT_QUATERNION_STEP", "DURATION_FACTOR_RANGE", "HEIGHT_RANGE_M", "STILL_S",
    "TASKS", "TASK_DESCRIPTIONS", "WIND_DOWN_REST_S", "Body", "Performer", "Plan", "SyntheticOperator",
    "VirtualClock", "generate", "generate_dataset", "minimum_jerk", "realise",
]
