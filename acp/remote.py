"""Agents on other hosts: a `command:` that starts with `ssh` (docs/configuration.md "Agents on
other hosts"). Pure: what the bridge decides from the command line alone.

- `is_remote`: the agent runs elsewhere; the bridge does not sandbox it (docs/sandbox.md).
- `command_line`: what the bridge runs. ssh reads `~/.ssh/config` (and `/etc/ssh/ssh_config`)
  unless told `-F FILE`, and such a file can make ssh run any program (`ProxyCommand`,
  `LocalCommand`, `KnownHostsCommand`, `Match exec`) as the bridge, outside every sandbox. An
  agent with a writable home folder could write one; so the bridge adds `-F /dev/null` unless the
  command names its own `-F FILE`, which the config loader refuses inside a folder a sandboxed
  agent can write (`config_within`). Everything else comes from the command the owner wrote.
- `destination`: the host the command goes to, for the owner's lines.
- `connection_line`: ssh's own reason when the connection failed or was lost, in one line
  (`last_line`: the last line of some stderr, which errors.py uses too).
- `files_refused`: why the bridge never reads a file a remote agent names by path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# ssh(1)'s options: those that take an argument, and the flags (OpenSSH 9)
WITH_ARGUMENT = frozenset("BbcDEeFIiJLlmOoPpQRSWw")
FLAGS = frozenset("46AaCfGgKkMNnqsTtVvXxYy")
NO_CONFIG = "/dev/null"
SSH_FAILED = 255  # ssh's exit code when ssh itself failed (not the remote command)


@dataclass(frozen=True)
class SshLine:
    """An ssh command line read as ssh reads it."""

    options: tuple[tuple[str, str | None], ...]  # (letter, argument) in order
    destination: str | None  # `[user@]host` or `ssh://…`; None if the line has none
    remote: tuple[str, ...]  # the command run on the other host


def is_remote(command: Sequence[str]) -> bool:
    """An agent started over ssh runs on another machine: the bridge does not sandbox it."""
    return bool(command) and os.path.basename(command[0]) == "ssh"


def parse(command: Sequence[str]) -> SshLine:
    """`command` (ssh and its words) split into its options, destination and remote command, as
    ssh's getopt does: options end at the first word that is not one, or at `--`."""
    words = list(command[1:])
    options: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        j = 1
        while j < len(word):
            letter = word[j]
            if letter in WITH_ARGUMENT:
                if j + 1 < len(word):
                    options.append((letter, word[j + 1 :]))
                elif i + 1 < len(words):
                    i += 1
                    options.append((letter, words[i]))
                else:
                    options.append((letter, None))
                break
            options.append((letter, None))
            j += 1
        i += 1
    destination = words[i] if i < len(words) else None
    return SshLine(tuple(options), destination, tuple(words[i + 1 :]))


def config_file(command: Sequence[str]) -> str | None:
    """The `-F FILE` the command names (the last one, as ssh takes it), or None."""
    found = [value for letter, value in parse(command).options if letter == "F"]
    return found[-1] if found else None


def config_within(file: str, writable: Mapping[str, Sequence[str]]) -> tuple[str, str] | None:
    """(agent, folder) when the ssh config `file` lies in a folder an agent can write
    (`writable`: each sandboxed agent's writable folders, absolute); else None. Paths are
    compared as given (the caller resolves links)."""
    if file == NO_CONFIG or not os.path.isabs(file):
        return None
    path = os.path.normpath(file)
    for agent, folders in writable.items():
        for folder in folders:
            folder = os.path.normpath(folder)
            if path == folder or path.startswith(folder.rstrip("/") + "/"):
                return agent, folder
    return None


def command_line(command: Sequence[str]) -> list[str]:
    """What the bridge runs for a remote agent: `command` with `-F /dev/null` after `ssh`, unless
    it names a config file of its own; any other command as it is."""
    if not is_remote(command) or config_file(command) is not None:
        return list(command)
    return [command[0], "-F", NO_CONFIG, *command[1:]]


def destination(command: Sequence[str]) -> str:
    """The host a remote agent's command goes to (without the user), or "another host"."""
    target = parse(command).destination if is_remote(command) else None
    if not target:
        return "another host"
    if target.startswith("ssh://"):
        target = target[len("ssh://") :].split("/", 1)[0]
        if target.rsplit(":", 1)[-1].isdigit() and not target.endswith("]"):
            target = target.rsplit(":", 1)[0]
    return target.rsplit("@", 1)[-1] or "another host"


def last_line(text: str, limit: int = 300) -> str:
    """The last non-blank line of some stderr, shortened: for one-line messages."""
    for line in reversed(text.splitlines()):
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else "…" + line[-limit:]
    return ""


def connection_line(host: str, exit_code: int | None, stderr: str) -> str | None:
    """One line for ssh's own failure (exit code 255: no connection, or the connection lost)
    with ssh's reason, its last line of error output; None when the remote command itself ended
    (its exit code is passed on by ssh: the agent crashed there, said as any crash)."""
    if exit_code != SSH_FAILED:
        return None
    reason = last_line(stderr)
    if not reason:  # what ssh prints nothing for: the agent was killed by a signal over there
        return f"the ssh connection to {host} ended (exit code 255, no reason given: the agent was killed there?)"
    return f"the ssh connection to {host} failed: {reason.rstrip('.')}"


def files_refused(agent: str, host: str) -> str:
    """Why a file a remote agent names by path (`file://`, `send_file`) is not read."""
    return (
        f"{agent} runs on {host} over ssh: the files it names are there, not on this machine, so "
        "the bridge reads none of them; the agent can send the content itself (an ACP resource "
        "with text or blob)"
    )
