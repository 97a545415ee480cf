"""Where things live: the per-user config file and the per-config data folder (ADR §5).

The data folder is named by a hash of the config file's absolute path, so two config
files never share a database, and moving the config file starts a new one (like the ADR).
"""
from __future__ import annotations

import hashlib
import os
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


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (tokens, passwords): created 0600, never wider."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o600)  # an older file may have been wider
