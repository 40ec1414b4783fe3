"""What the Xsens live source does with MVN's streamed centre of mass (type 24)."""

import numpy as np

from retarget import skeleton
from teleop.inputs.base import check_frame
from teleop.inputs.mvn_protocol import MvnCodec
from teleop.inputs.xsens_live import XsensLiveSource


def test_streamed_com_is_exposed_on_the_source_not_in_the_frames():
    """The CoM is parsed into source.com; frames stay (t, pose) with segment poses only."""
    motion = skeleton.standard_body_motion(np.arange(2) * 0.01)
    pose = {n: (motion.positions[0, i], motion.orientations[0, i]) for i, n in enumerate(motion.segment_names)}
    codec = MvnCodec()
    with XsensLiveSource(("127.0.0.1", 0)) as source:
        for datagram in codec.encode_center_of_mass(1, 10, np.array([0.3, 0.1, 0.9])) + codec.encode_pose(1, 10, pose):
            source.handle_datagram(datagram, 0.0)
        frame = source.poll()
        np.testing.assert_allclose(source.com, [0.3, 0.1, 0.9], atol=1e-6)
    t, segments = check_frame(frame)
    assert set(segments) == set(motion.segment_names)   # no CoM entry: retargeting estimates its own
