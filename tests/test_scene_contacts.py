"""The robot station says when the robot touches the scene: a contact pushes the joints
beyond the speeds the controller commands (measured 1.75 of a limit with a hand on the
table), which otherwise looked like a controller fault."""

import numpy as np

from teleop.clock import VirtualClock
from teleop.net.delay import LinkModel
from teleop.net.protocol import PacketCodec
from teleop.net.virtual import connect_virtual
from teleop.sim.scene import Box, SceneObject, ShapePart, add_to_simulation
from teleop.stations.robot_station import RobotStation, RobotStationConfig


def test_a_box_at_the_hand_is_a_contact_named_by_link_and_object(robot, station_sim):
    clock = VirtualClock(5000.0)     # a real-time station's clock: the host's monotonic one
    _, robot_ep = connect_virtual(PacketCodec(b"k" * 32), LinkModel.thesis(0.0), clock, seed=1)
    station = RobotStation(robot_ep, robot, station_sim, None, RobotStationConfig(video_hz=0.0))
    assert station_sim.touching() == []
    hand = station_sim.link_position(robot.description.frames["right_hand"])
    box = SceneObject("crate", (ShapePart(Box((0.03, 0.03, 0.03)), (0.5, 0.4, 0.3)),), position=tuple(hand),
                      mass=0.0)
    scene = add_to_simulation(station_sim, [box], static=True)
    station.name_scene(scene)
    clock.set(5000.0)
    station.tick()
    touching = station_sim.touching()
    assert {body for body, _ in touching} == set(scene.body_ids) and "r_hand" in {link for _, link in touching}
    for k in range(1, 5):       # the contact pushes the hand out of the box: it ends
        clock.set(5000.0 + k * station.dt)
        station.tick()
    assert 1 <= station.scene_contact_ticks < 5
    # Said in time since the session began, not as the clock reads (5000 s).
    assert station.first_scene_contact.endswith("touched the crate 0.00 s into the session")
    telemetry = station.telemetry()
    assert np.isclose(telemetry["scene_contact_s"], station.scene_contact_ticks * station.dt)
    assert telemetry["first_scene_contact"] == station.first_scene_contact
