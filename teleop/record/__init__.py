"""Session recording: operator and robot stations write MCAP files used as training data.

* :class:`Recorder` writes one crash-tolerant MCAP file with named channels on one clock
  (see :mod:`teleop.record.channels` for the channel table, schemas and encodings).
* :func:`open_recording` reads a recording, complete or cut short by a crash;
  :func:`recover` reports what a crashed file holds and can write a complete copy.
* :func:`add_episode` / :func:`relabel_episode` (:mod:`teleop.record.labels`) label a
  recording, all of it or a window, or one of its episodes; :func:`write_copy` writes the
  result (and trims); :func:`export_episodes` writes the labelled episodes as
  ReferenceTrajectory files, one folder per task.
* ``teleop dataset ...`` (:mod:`teleop.record.dataset_cli`) and ``teleop record ...``
  (:mod:`teleop.record.record_cli`) are the command-line front ends.
"""

from .channels import (
    COMMANDS_COMPENSATED,
    COMMANDS_DELIVERED,
    EPISODES,
    NETWORK_STATS,
    OPERATOR_INPUT,
    REFERENCES,
    ROBOT_STATE,
    ChannelSpec,
    resolve_topic,
)
from .export import ExportResult, export_episodes
from .labels import add_episode, relabel_episode
from .mcap_index import RecordingFormatError
from .messages import CameraFrame, EpisodeMarker, RobotStateSample
from .reader import ChannelInfo, Episode, RecordedMessage, Recording, open_recording
from .recorder import Recorder, RecorderStats, RecordingWriteError
from .recovery import RecoveryReport, recover
from .rewrite import write_copy

__all__ = [
    "COMMANDS_COMPENSATED", "COMMANDS_DELIVERED", "EPISODES", "NETWORK_STATS", "OPERATOR_INPUT", "REFERENCES",
    "ROBOT_STATE", "CameraFrame", "ChannelInfo", "ChannelSpec", "Episode", "EpisodeMarker", "ExportResult",
    "RecordedMessage", "Recorder", "RecorderStats", "Recording", "RecordingFormatError", "RecordingWriteError",
    "RecoveryReport", "RobotStateSample", "add_episode", "export_episodes", "open_recording", "recover",
    "relabel_episode", "resolve_topic", "write_copy",
]
