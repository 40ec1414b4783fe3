"""``python -m teleop.net netem ...``: the network tools without the application CLI."""

import sys

from teleop.net.cli import main

sys.exit(main())
