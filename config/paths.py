"""Where things live: the per-user config file and the per-config data folder
(docs/architecture.md "The store").

The data folder is named by a hash of the config file's absolute path, so two config
files never share a database, and moving the config file starts a new one.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

import platformdirs


def user_config_root() -> Path:
    """`<user config dir>/sidekicks` (honours XDG_CONFIG_HOME on Linux)."""
    return Path(platformdirs.user_config_dir("sidekicks", appauthor=False))


def default_config_path() -> Path:
    return user_config_root() / "config.yaml"


def config_hash(config_path: str | os.PathLike) -> str:
    absolute = os.path.abspath(os.fspath(config_path))
    return hashlib.sha256(absolute.encode("utf-8")).hexdigest()[:16]


def data_dir(config_path: str | os.PathLike) -> Path:
    return user_config_root() / "data" / config_hash(config_path)


def write_private(path: Path, text: str, mode: int = 0o600) -> None:
    """Write a file only its owner can read (tokens, passwords), atomically; `mode`: another
    mode, for a file rewritten as it was (a config the bridge edits: config/config_edit.py).

    The text goes into a new file in the same folder, created 0600 (O_EXCL, O_NOFOLLOW: never an
    existing file, never through a symlink), flushed to disk, then renamed over `path`. So the
    secret is never in a file anyone else can read, even for a moment (an older, wider file is
    replaced, not rewritten), a symlink at `path` is replaced rather than followed, and a crash
    leaves the old file or the new one, never half of it. Folders it creates are 0700.
    """
    path = Path(path)
    _make_folders(path.parent)
    for _ in range(100):
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 100 random names all taken
        raise FileExistsError(f"cannot create a temporary file beside {path}")
    try:
        os.fchmod(fd, mode)  # whatever the umask did
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    try:  # the rename itself survives a crash once the folder is flushed
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    except OSError:
        pass


def _make_folders(folder: Path) -> None:
    """mkdir -p, each missing level 0700 (Path.mkdir gives missing parents the umask's mode)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for level in reversed(missing):
        try:
            level.mkdir(mode=0o700)
        except FileExistsError:
            pass
