"""AprilTag jogging: a tag held in front of a camera drives a robot hand.

Data flows one way (reference controller_coupling_and_jogging.md, Part B, and the fixes
of §B.9 it lists):

    camera.py             frames from a device index, a video file or a stream URL
    camera_intrinsics.py  intrinsics (K, distortion) from a file; calibration from chessboard/ChArUco
    detection.py          AprilTag 36h11 corners + 6-DoF pose (solvePnP IPPE_SQUARE)
    filtering.py          One-Euro position filter, SO(3) One-Euro orientation filter gated by its noise
    mapping.py            camera frame -> robot base frame (offset, scale, axis map), absolute and
                          relative (clutch) jogging, damping factor s with slerp (Eqs. 5.1-5.2)
    safety.py             reachability, continuous-joint unwrapping, 90 deg jump guard, velocity limits
    collision.py          self- and obstacle collision checks of interpolated states (pybullet)
    session.py            the 100 Hz loop: filter -> map -> damp -> whole-body QP -> safety -> robot
    render.py             synthetic camera images of planar targets (benchmark and tests)
    web.py                browser view of a session (camera + detection, robot skeletons)
    cli.py                ``teleop jog`` and ``teleop calibrate-camera``
"""
