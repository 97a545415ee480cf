"""The gate for files an agent asks the bridge to post (bridge/channels/turns/agent_files.py), pure:
real files, links, /proc, /dev/zero and a FIFO on this machine, no Matrix."""

from __future__ import annotations

import os
import threading
from types import SimpleNamespace

import pytest

from bridge.channels.turns.agent_files import FileRoots, Refused, read_agent_file, roots_for
from bridge.matrix.media import MediaError

MIB = 1024 * 1024


@pytest.fixture
def cwd(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("hello")
    return work


def refused(result) -> str:
    assert isinstance(result, Refused), f"read, not refused: {result[:80]!r}"
    return result.reason


def test_a_regular_file_inside_the_working_directory_is_read(cwd):
    assert read_agent_file(cwd / "notes.txt", cwd, [], MIB) == b"hello"
    (cwd / "sub").mkdir()
    (cwd / "sub" / "link").symlink_to(cwd / "notes.txt")  # a link that stays inside is fine
    assert read_agent_file(cwd / "sub" / "link", cwd, [], MIB) == b"hello"


def test_no_working_directory_means_no_file(cwd):
    assert "no working directory" in refused(read_agent_file(cwd / "notes.txt", None, [], MIB))


def test_the_registration_file_in_the_config_folder_is_refused_even_inside_the_cwd(tmp_path):
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    registration = config_dir / "registration.yaml"
    registration.write_text("as_token: secret\nhs_token: secret\n")
    # the agent works in the folder above: the config folder is inside its cwd, and still refused
    reason = refused(read_agent_file(registration, tmp_path, [config_dir], MIB))
    assert "configuration or data folder" in reason
    # and a link to it from the cwd resolves to it
    (tmp_path / "innocent.txt").symlink_to(registration)
    assert "configuration or data folder" in refused(
        read_agent_file(tmp_path / "innocent.txt", tmp_path, [config_dir], MIB)
    )


def test_a_symlink_out_of_the_working_directory_is_refused(cwd, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("password")
    (cwd / "escape").symlink_to(secret)
    assert "outside the agent's working directory" in refused(read_agent_file(cwd / "escape", cwd, [], MIB))
    assert "outside" in refused(read_agent_file(f"{cwd}/../secret.txt", cwd, [], MIB))
    # a sibling folder whose name starts like the cwd is not inside it
    sibling = tmp_path / "work-evil"
    sibling.mkdir()
    (sibling / "x").write_text("x")
    assert "outside" in refused(read_agent_file(sibling / "x", cwd, [], MIB))


def test_a_file_with_more_than_one_hard_link_is_refused(cwd, tmp_path):
    """A hard link in the working directory to a file outside it is the same file: refused,
    as is any file with a second name; one name again, it is read."""
    secret = tmp_path / "registration.yaml"
    secret.write_text("as_token: secret")
    os.link(secret, cwd / "innocent.txt")
    assert "2 hard links" in refused(read_agent_file(cwd / "innocent.txt", cwd, [], MIB))
    os.link(cwd / "notes.txt", cwd / "again.txt")  # both inside: still two names
    assert "hard links" in refused(read_agent_file(cwd / "notes.txt", cwd, [], MIB))
    os.unlink(cwd / "again.txt")
    assert read_agent_file(cwd / "notes.txt", cwd, [], MIB) == b"hello"


def test_proc_files_are_refused_outside_and_read_with_a_byte_cap_not_their_reported_size(cwd):
    assert "outside" in refused(read_agent_file("/proc/self/environ", cwd, [], MIB))
    (cwd / "env").symlink_to("/proc/self/environ")
    assert "outside" in refused(read_agent_file(cwd / "env", cwd, [], MIB))
    # /proc reports a size of 0 for a file that has content: the cap counts bytes read
    assert os.stat("/proc/self/maps").st_size == 0
    assert "bigger than" in refused(read_agent_file("/proc/self/maps", "/proc", [], 64))
    assert len(read_agent_file("/proc/self/maps", "/proc", [], MIB)) > 64


def test_dev_zero_is_not_a_regular_file_and_is_never_read(cwd):
    (cwd / "zero").symlink_to("/dev/zero")
    assert "outside" in refused(read_agent_file(cwd / "zero", cwd, [], MIB))
    # even where devices are "inside" (an agent whose cwd is /dev), a device is refused
    assert "not a regular file (a device)" in refused(read_agent_file("/dev/zero", "/dev", [], MIB))


def test_a_fifo_is_refused_at_once_without_a_writer(cwd):
    fifo = cwd / "pipe"
    os.mkfifo(fifo)
    result: list = []
    reader = threading.Thread(target=lambda: result.append(read_agent_file(fifo, cwd, [], MIB)), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert "not a regular file (a pipe)" in refused(result[0])


def test_a_file_over_the_cap_and_a_folder_and_a_missing_file_are_refused(cwd):
    (cwd / "big").write_bytes(b"x" * 1001)
    assert "bigger than" in refused(read_agent_file(cwd / "big", cwd, [], 1000))
    assert read_agent_file(cwd / "big", cwd, [], 1001) == b"x" * 1001
    assert "a folder" in refused(read_agent_file(cwd, cwd, [], MIB))
    assert "could not be found" in refused(read_agent_file(cwd / "nope", cwd, [], MIB))
    assert "absolute" in refused(read_agent_file("notes.txt", cwd, [], MIB))


def two_agents(tmp_path, work, data_dir) -> SimpleNamespace:
    """A config of alice (working in `work`) and bob (no cwd), its own folders under `tmp_path`
    but the data folder `data_dir`."""
    return SimpleNamespace(
        agents={"alice": SimpleNamespace(cwd=str(work)), "bob": SimpleNamespace(cwd=None)},
        path=tmp_path / "cfg" / "config.yaml",
        data_dir=data_dir,
        registration_path=tmp_path / "reg" / "registration.yaml",
        homeserver_config=None,
    )


def test_roots_for_an_agent_forbid_the_config_data_and_registration_folders(tmp_path):
    config = two_agents(tmp_path, tmp_path / "work", tmp_path / "data")
    roots = roots_for(config, "alice")
    assert roots.allowed == str(tmp_path / "work")
    assert set(roots.forbidden) == {str(tmp_path / "cfg"), str(tmp_path / "data"), str(tmp_path / "reg")}
    assert roots_for(config, "bob") == FileRoots(None, roots.forbidden, "bob")


def test_roots_for_a_session_follow_the_directory_it_works_in(tmp_path):
    """A session in a thread's worktree (or a `!cwd` folder) posts from there, not from the
    configured cwd it does not work in; the bridge's own folders stay forbidden even inside it."""
    work, tree = tmp_path / "work", tmp_path / "work.worktrees" / "t1"
    (work / "data").mkdir(parents=True)
    tree.mkdir(parents=True)
    (work / "main.txt").write_text("main")
    (tree / "mine.txt").write_text("mine")
    (work / "data" / "keys").write_text("secret")
    config = two_agents(tmp_path, work, work / "data")
    in_tree = roots_for(config, "alice", str(tree))
    assert in_tree.allowed == str(tree)
    assert in_tree.forbidden == roots_for(config, "alice").forbidden
    assert read_agent_file(tree / "mine.txt", in_tree.allowed, in_tree.forbidden, MIB) == b"mine"
    assert "outside" in refused(read_agent_file(work / "main.txt", in_tree.allowed, in_tree.forbidden, MIB))
    # a session in the main checkout still never posts the bridge's data folder inside it
    in_work = roots_for(config, "alice", str(work))
    assert "configuration or data" in refused(
        read_agent_file(work / "data" / "keys", in_work.allowed, in_work.forbidden, MIB)
    )
    # no session directory known: the configured cwd (none: nothing may be posted)
    assert roots_for(config, "alice", None).allowed == str(work)
    assert roots_for(config, "bob", str(tree)).allowed == str(tree)
    assert roots_for(config, "bob", None).allowed is None


async def test_an_agent_over_ssh_gets_no_file_read_even_inside_its_cwd(cwd, tmp_path):
    """Its paths name files on its host (acp/remote.py): the same path here is another file."""
    agents = {"far": SimpleNamespace(cwd=str(cwd), command=["ssh", "-i", "/k", "me@box", "agent"])}
    config = SimpleNamespace(
        agents=agents,
        path=tmp_path / "config" / "config.yaml",
        data_dir=tmp_path / "data",
        registration_path=tmp_path / "config" / "registration.yaml",
    )
    roots = roots_for(config, "far")
    assert roots.remote == "box" and roots.allowed == str(cwd)
    with pytest.raises(MediaError, match=r"far runs on box over ssh: .* \(an ACP resource with text or blob\)"):
        await roots.read(cwd / "notes.txt", MIB)
