"""Secrets and history are the owner's alone: written 0600 atomically without
following symlinks; the data folder 0700; the SQLite files 0600 whatever the umask."""

from __future__ import annotations

import os
import stat

import pytest

from config.paths import write_private
from store import Store


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)  # what most systems have: new files 0644, folders 0755
    yield
    os.umask(old)


def test_a_secret_is_never_in_a_wider_file_even_for_a_moment(tmp_path, umask_022):
    path = tmp_path / "registration.yaml"
    path.write_text("old: tokens\n")
    os.chmod(path, 0o644)  # left wide by someone
    with open(path) as before:  # a reader that opened it earlier
        write_private(path, "as_token: secret\n")
        # the secret went into a new file, renamed over the old one: the old, wide file was
        # never rewritten with it (writing in place then chmod would show it here)
        assert before.read() == "old: tokens\n"
    assert path.read_text() == "as_token: secret\n" and mode(path) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["registration.yaml"]  # no temporary left


def test_a_symlink_is_replaced_not_followed(tmp_path, umask_022):
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("not yours to write\n")
    path = tmp_path / "owner-password"
    path.symlink_to(elsewhere)
    write_private(path, "hunter2\n")
    assert elsewhere.read_text() == "not yours to write\n"
    assert not path.is_symlink() and path.read_text() == "hunter2\n" and mode(path) == 0o600


def test_folders_it_makes_are_0700(tmp_path, umask_022):
    path = tmp_path / "new" / "deeper" / "secret"
    write_private(path, "x")
    assert mode(tmp_path / "new") == 0o700 and mode(tmp_path / "new" / "deeper") == 0o700
    assert mode(path) == 0o600


def test_the_history_files_and_the_data_folder_are_private(tmp_path, umask_022):
    folder = tmp_path / "data"
    store = Store.open("sqlite", folder)
    try:
        store.mark_txn("t")  # the -wal and -shm files exist once something is written
        files = {p.name: mode(p) for p in folder.iterdir()}
    finally:
        store.close()
    assert files == {
        "sidekicks.db": 0o600,
        "sidekicks.db-wal": 0o600,
        "sidekicks.db-shm": 0o600,
        "sidekicks.lock": 0o600,
    }, {k: oct(v) for k, v in files.items()}
    assert mode(folder) == 0o700


def test_history_files_left_wide_by_an_older_version_are_narrowed(tmp_path, umask_022):
    folder = tmp_path / "data"
    Store.open("sqlite", folder).close()
    os.chmod(folder, 0o755)
    for name in ("sidekicks.db", "sidekicks.lock"):
        os.chmod(folder / name, 0o644)
    store = Store.open("sqlite", folder)
    try:
        store.mark_txn("t")
    finally:
        store.close()
    assert mode(folder) == 0o700 and mode(folder / "sidekicks.db") == 0o600
    assert mode(folder / "sidekicks.lock") == 0o600
