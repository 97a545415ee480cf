"""acp/remote.py: what the bridge decides from an ssh command line (docs/sandbox.md "Agents on
other hosts")."""

from __future__ import annotations

import pytest

from acp.remote import (
    command_line,
    config_file,
    config_within,
    connection_line,
    destination,
    files_refused,
    is_remote,
    parse,
)


def test_agents_over_ssh_are_remote():
    assert is_remote(["ssh", "-o", "BatchMode=yes", "box", "agent"])
    assert is_remote(["/usr/bin/ssh", "box"])
    assert not is_remote(["opencode", "acp"]) and not is_remote([])
    assert not is_remote(["python", "ssh"])


def test_the_line_is_read_as_ssh_reads_it():
    line = parse(
        ["ssh", "-i", "/k", "-p2222", "-qT", "-o", "BatchMode=yes", "me@box", "cd /w && exec agent", "-F", "x"]
    )
    assert line.options == (("i", "/k"), ("p", "2222"), ("q", None), ("T", None), ("o", "BatchMode=yes"))
    assert line.destination == "me@box"
    assert line.remote == ("cd /w && exec agent", "-F", "x")  # the remote command's words, not ssh's
    assert parse(["ssh", "-v", "--", "-box", "a"]).destination == "-box"
    assert parse(["ssh", "-o"]).options == (("o", None),) and parse(["ssh", "-o"]).destination is None


def test_the_bridge_reads_no_ssh_config_unless_the_command_names_one():
    plain = ["ssh", "-o", "BatchMode=yes", "box", "agent"]
    assert command_line(plain) == ["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "box", "agent"]
    assert config_file(command_line(plain)) == "/dev/null"
    own = ["/usr/bin/ssh", "-F", "/etc/sidekicks/ssh_config", "box", "agent"]
    assert command_line(own) == own and config_file(own) == "/etc/sidekicks/ssh_config"
    glued = ["ssh", "-qF/etc/s", "box"]
    assert command_line(glued) == glued and config_file(glued) == "/etc/s"
    # a -F of the remote command is not ssh's: the bridge still adds its own
    later = ["ssh", "box", "agent", "-F", "x"]
    assert command_line(later)[:3] == ["ssh", "-F", "/dev/null"] and config_file(later) is None
    assert command_line(["python", "agent.py"]) == ["python", "agent.py"]


@pytest.mark.parametrize(
    ("command", "host"),
    [
        (["ssh", "-p", "22", "me@box.lan", "a"], "box.lan"),
        (["ssh", "box"], "box"),
        (["ssh", "ssh://me@box:2222/x"], "box"),
        (["ssh", "-o", "BatchMode=yes"], "another host"),
        (["python"], "another host"),
    ],
)
def test_the_host_is_named_without_the_user(command, host):
    assert destination(command) == host


def test_sshs_own_failure_is_one_line_with_its_reason():
    refused = "Warning: something\nssh: connect to host 127.0.0.2 port 2222: Connection refused\n"
    assert connection_line("127.0.0.2", 255, refused) == (
        "the ssh connection to 127.0.0.2 failed: ssh: connect to host 127.0.0.2 port 2222: Connection refused"
    )
    lost = connection_line("box", 255, "Connection to box closed by remote host.\n")
    assert lost == "the ssh connection to box failed: Connection to box closed by remote host"
    assert "\n" not in (connection_line("box", 255, "") or "x")
    assert "killed" in (connection_line("box", 255, "") or "")
    assert connection_line("box", 3, "Traceback…\nValueError") is None  # the agent's own crash


def test_files_of_a_remote_agent_are_refused_saying_how_to_send_them():
    line = files_refused("alice", "box")
    assert "alice runs on box over ssh" in line and "resource" in line and "\n" not in line


def test_an_ssh_config_inside_an_agents_writable_folder_is_found():
    writable = {"near": ["/home/me/work", "/home/me/.claude"], "other": ["/srv"]}
    assert config_within("/home/me/work/sub/ssh_config", writable) == ("near", "/home/me/work")
    assert config_within("/srv", writable) == ("other", "/srv")
    assert config_within("/home/me/workshop/ssh_config", writable) is None  # a neighbour, not inside
    assert config_within("/etc/sidekicks/ssh_config", writable) is None
    assert config_within("/dev/null", {"root": ["/"]}) is None  # the bridge's own choice
    assert config_within("relative/ssh_config", writable) is None
