"""The shared secret that keys packet MACs, and where it comes from.

Decision (what a user gets without configuring anything):

* **Both stations in one process** (demo, trials, tests): call :func:`session_secret`, a
  fresh random secret per run. Nothing to configure, nothing written to disk.
* **Separate processes** (two terminals, two machines): the station CLIs call
  ``load_secret(path, create_default=True)``. Looked up in this order:

  1. ``path`` (e.g. a ``--secret-file`` flag): must exist and must not be readable by
     group or others (like ssh keys); a missing explicit file is an error, never created,
     because a fresh file on one side only would silently mismatch the other side.
  2. the environment variable ``TELEOP_SECRET`` (at least 16 bytes of UTF-8 text).
  3. the default file :func:`default_secret_path` (``$XDG_CONFIG_HOME/teleop/secret``,
     else ``~/.config/teleop/secret``). With ``create_default=True`` it is created on
     first use: 32 random bytes as 64 hex characters, mode 0600 in a 0700 directory.
     Two processes of the same user on one machine therefore agree out of the box; for
     two machines copy the file (``scp``) or set ``TELEOP_SECRET`` on both.
  4. ``insecure_dev=True``: a fixed, public key, with a warning. For debugging with
     packet captures only; anyone can forge packets.
  5. otherwise :class:`SecretNotConfigured`, whose message lists the options above.

The file content is used verbatim (minus surrounding whitespace) as the secret, so a
passphrase works as well as the generated hex string. When the two sides' secrets differ
every packet is dropped as ``bad_mac``; :class:`teleop.net.packet_filter.PacketFilter` logs a
warning the first time that happens.

``python -m teleop.net.secret [PATH]`` creates the default (or the given) secret file.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
import sys
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

ENV_VAR = "TELEOP_SECRET"
MIN_SECRET_BYTES = 16
#: Public, fixed key for ``insecure_dev`` mode. Not a secret by construction.
INSECURE_DEV_SECRET = b"teleop-insecure-development-key-do-not-deploy"


class SecretError(RuntimeError):
    """The secret exists but cannot be used (too short, too open, unreadable)."""


class SecretNotConfigured(SecretError):
    """No secret was given and none of the default sources has one."""


def session_secret() -> bytes:
    """A fresh random 32-byte secret, for stations that run in one process."""
    return secrets.token_bytes(32)


def default_secret_path() -> Path:
    """``$XDG_CONFIG_HOME/teleop/secret``, or ``~/.config/teleop/secret``."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "teleop" / "secret"


def create_secret_file(path: str | os.PathLike | None = None) -> Path:
    """Create a secret file (mode 0600) unless it already exists; return its path.

    Creation is atomic: the content is written to a private temporary file that is then
    hard-linked into place, so a concurrent reader never sees a half-written secret and
    two concurrent creators end up agreeing on one file.
    """
    target = Path(path) if path is not None else default_secret_path()
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if target.exists():
            return target
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".secret-")  # mkstemp uses 0600
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
            try:
                os.link(tmp, target)
                log.warning("created a new teleop secret in %s; copy it to the other station's "
                            "machine or set %s there", target, ENV_VAR)
            except FileExistsError:
                pass  # another process won the race; use its file
        finally:
            os.unlink(tmp)
    except OSError as exc:  # unwritable config dir, a file where the dir should be, ...
        raise SecretError(f"cannot create secret file {target}: {exc.strerror or exc}; set "
                          f"{ENV_VAR} or pass a secret file instead") from None
    return target


def read_secret_file(path: str | os.PathLike) -> bytes:
    """Read a secret file, refusing files that other users can read."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise SecretError(f"secret file {path} does not exist; create one with "
                          f"`python -m teleop.net.secret {path}`") from None
    except OSError as exc:
        raise SecretError(f"cannot read secret file {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        # A FIFO (or a device) blocks the read until a writer comes: the station hung in
        # silence. (A folder fails the read below, with its own words.)
        raise SecretError(f"secret file {path} is not a regular file (a pipe or a device): give the file "
                          f"`python -m teleop.net.secret` writes")
    if os.name == "posix" and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretError(f"secret file {path} is accessible by other users "
                          f"(mode {stat.S_IMODE(st.st_mode):o}); run `chmod 600 {path}`")
    try:
        content = path.read_bytes()
    except OSError as exc:  # a directory, or a file we may not read (another owner, mode 000)
        raise SecretError(f"cannot read secret file {path}: {exc.strerror or exc}") from None
    return _checked(content.strip(), f"secret file {path}")


def load_secret(path: str | os.PathLike | None = None, *, create_default: bool = False,
                insecure_dev: bool = False) -> bytes:
    """Return the shared secret, following the order in the module docstring.

    Args:
        path: explicit secret file; wins over everything else.
        create_default: create the default secret file if no other source has a secret.
        insecure_dev: fall back to the public development key instead of failing.

    Raises:
        SecretNotConfigured: no source has a secret.
        SecretError: a source exists but is unusable.
    """
    if path is not None:
        return read_secret_file(path)
    from_env = os.environ.get(ENV_VAR)
    if from_env is not None:
        try:
            encoded = from_env.encode("utf-8")
        except UnicodeEncodeError:
            # Bytes that are not UTF-8 (set in a Latin-1 terminal) reach os.environ as lone
            # surrogates, and encoding them raised UnicodeEncodeError: a traceback at start-up.
            raise SecretError(f"${ENV_VAR} is not UTF-8 text (set it in a UTF-8 terminal, or use a secret "
                              "file, whose bytes are used as they are)") from None
        return _checked(encoded, f"${ENV_VAR}")
    default = default_secret_path()
    if default.exists() or create_default:
        return read_secret_file(create_secret_file(default) if create_default else default)
    if insecure_dev:
        log.warning("using the public development key: packets are NOT authenticated")
        return INSECURE_DEV_SECRET
    raise SecretNotConfigured(
        "no shared secret for the teleoperation link. Either set the environment variable "
        f"{ENV_VAR} (≥ {MIN_SECRET_BYTES} characters) on both stations, pass a secret file, "
        f"or create the default file {default} with `python -m teleop.net.secret` and copy "
        "it to the other station (stations running in one process need none of this)."
    )


def _checked(secret: bytes, source: str) -> bytes:
    if len(secret) < MIN_SECRET_BYTES:
        raise SecretError(f"{source} holds {len(secret)} bytes; a secret needs at least {MIN_SECRET_BYTES}")
    return secret


def main(argv: list[str] | None = None) -> int:
    """``python -m teleop.net.secret [FILE]``: create a station secret (kept if it exists)
    and print its path. Options are parsed, so ``--help`` is help, not a file name."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m teleop.net.secret",
                                     description="Create the shared secret of the two stations (32 random bytes, "
                                                 "owner-only) unless the file exists, and print its path. Copy it "
                                                 f"to the other station, or set {ENV_VAR} on both.")
    parser.add_argument("file", nargs="?", type=Path,
                        help=f"where to write it (default: {default_secret_path()})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        print(create_secret_file(args.file))
    except SecretError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
