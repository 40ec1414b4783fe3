"""A review of the stations and the network, as a user meets them: each test fails without its fix."""

from __future__ import annotations

import pytest

from conftest import error_line, free_port
from teleop.cli import main


def test_the_robot_sends_its_camera_off_host_only_when_allowed(capsys):
    """`teleop robot --video-to 192.0.2.2:P` streamed the eye camera to another host without
    --allow-remote, which every other address the stations use needs."""
    rc = main(["robot", "--listen", f"127.0.0.1:{free_port()}", "--video-to", "192.0.2.2:47077", "--duration", "1"])
    assert rc == 1
    assert error_line(capsys.readouterr().err) == (
        "--video-to 192.0.2.2:47077: refusing to send the eye camera to non-loopback address 192.0.2.2; give "
        "--allow-remote to send it to another host")


def test_an_operator_whose_video_port_is_its_command_port_is_told_so(capsys):
    """It said "--video-listen ...: Address already in use", exit 1: its own --bind held it."""
    port = free_port()
    assert main(["operator", "--robot", f"127.0.0.1:{free_port()}", "--bind", f"127.0.0.1:{port}",
                 "--video-listen", f"127.0.0.1:{port}", "--duration", "1"]) == 2
    assert f"--video-listen 127.0.0.1:{port} is this station's own --bind" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["robot", "operator"])
def test_an_empty_secret_file_option_is_a_bad_value(capsys, command):
    """`--secret-file ""` was "--secret-file . is a folder", exit 1."""
    with pytest.raises(SystemExit) as exc:
        main([command, "--secret-file", "", "--duration", "1"])
    assert exc.value.code == 2
    assert "argument --secret-file: the path must not be empty" in capsys.readouterr().err


def test_netem_without_periodic_statistics_says_its_line_is_final(capsys):
    """With --stats-interval 0 the only line lacked "(final, N in flight dropped)", and the
    datagrams still in flight went unaccounted for."""
    assert main(["netem", "--listen", f"127.0.0.1:{free_port()}", "--target", f"127.0.0.1:{free_port()}",
                 "--duration", "0.2", "--stats-interval", "0"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("(final, 0 in flight dropped)")
