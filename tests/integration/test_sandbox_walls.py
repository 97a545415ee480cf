"""Nothing an agent can write holds the bridge (docs/sandbox.md "Nothing writable holds the
bridge", "The owner's credentials", "A working directory on purpose"), end to end: the prying
agent (tests/agents/prying_agent.py), started by the real bridge in real bubblewrap with
`cwd: "~"` — the whole home folder writable, as the shipped examples have it — tries what an
agent steered by a stranger would: rename ~/.config away and plant a config in its place, write
the bridge's virtual environment, a program the bridge runs (~/.local/bin on its PATH), the
user's systemd units and ~/.bashrc, read another config's owner password and the owner's ssh key.

The home folder is the test's own (HOME), laid out as the systemd units have it: the bridge's
virtual environment in ~/sidekicks/.venv (`sys.prefix` pointed there: the bridge protects the
installation it runs from), ~/.local/bin first on its PATH.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from bridge_harness import answers_in
from helpers import is_final, say
from matrix_helpers import events_in, open_dm, sync_until

PRYING = Path(__file__).resolve().parents[1] / "agents" / "prying_agent.py"
OTHER_DATA = "0123456789abcdef"  # another config's data folder


async def pry(owner, room: str, puppet: str, plan: dict, home: Path) -> dict:
    before = len([a for a in answers_in(events_in(owner, room), puppet) if "pried:" in a["body"]])
    await say(owner, room, "PRY" + json.dumps(plan) + "PRY")

    def done() -> bool:
        answers = [a for a in answers_in(events_in(owner, room), puppet) if a["msgtype"] != "m.notice"]
        return len([a for a in answers if is_final(a) and "pried:" in a["body"]]) > before

    await sync_until(owner, done, timeout=120)
    return json.loads((home / "pried.json").read_text())


def make_home(tmp_path: Path, monkeypatch) -> Path:
    home = tmp_path / "home"
    venv = home / "sidekicks" / ".venv"
    for folder in (
        ".config/systemd/user",
        f".config/sidekicks/data/{OTHER_DATA}",
        ".ssh",
        ".local/bin",
        "work",
        "sidekicks/.venv/lib/python3/site-packages",
    ):
        (home / folder).mkdir(parents=True)
    (home / ".bashrc").write_text("# mine\n")
    (home / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (home / ".config" / "sidekicks" / "data" / OTHER_DATA / "owner-password").write_text("other-password\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("PATH", f"{home / '.local' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(sys, "prefix", str(venv))  # the bridge's installation, as ~/sidekicks/.venv
    return home


async def test_an_agent_writing_the_home_folder_cannot_move_or_write_the_bridge(
    bridge_factory, homeserver, tmp_path, owner, monkeypatch
):
    home = make_home(tmp_path, monkeypatch)
    agent = {"command": [sys.executable, str(PRYING)], "cwd": "~", "sandbox": "on"}
    running = await bridge_factory({"alice": agent}, data_dir=tmp_path / "bridge0" / "data")
    site = home / "sidekicks" / ".venv" / "lib" / "python3" / "site-packages"
    moved = {
        ".config": ".config.moved",  # the attack: takes the hidden ~/.config/sidekicks along
        ".config/sidekicks": "sidekicks-config.moved",
        "sidekicks": "sidekicks.moved",
        "sidekicks/.venv": "venv.moved",
        ".local": ".local.moved",
        ".local/bin": "bin.moved",
        ".bashrc": "bashrc.moved",
        ".ssh": "ssh.moved",
        "work": "work.moved",  # an ordinary folder of the home: the agent's to move
    }
    planted = [
        home / ".config" / "sidekicks" / "config.yaml",
        home / ".config" / "systemd" / "user" / "evil.service",
        home / ".bashrc",
        site / "uvicorn.py",
        home / ".local" / "bin" / "bwrap",
        home / ".ssh" / "authorized_keys",
    ]
    room = await open_dm(owner)
    report = await pry(
        owner,
        room,
        "@sk_alice:localhost",
        {
            "rename": [[str(home / a), str(home / b)] for a, b in moved.items()],
            "write": [*map(str, planted), str(home / "notes.txt")],
            "read": [
                str(home / ".ssh" / "id_ed25519"),
                str(home / ".config" / "sidekicks" / "data" / OTHER_DATA / "owner-password"),
            ],
            "list": [str(home / ".config" / "sidekicks")],
        },
        home,
    )

    assert report["cwd"] == str(home)  # cwd: "~" is the home folder
    renamed = {path for path, found in report["rename"].items() if found["reached"]}
    assert renamed == {str(home / "work")}, report["rename"]
    assert "busy" in report["rename"][str(home / ".config")]["why"]  # a mount point
    written = {path for path, found in report["write"].items() if found["reached"]}
    assert written == {str(home / "notes.txt")}, report["write"]
    assert not any(found["reached"] for found in report["read"].values()), report["read"]
    assert not any(found["reached"] for found in report["list"].values()), report["list"]
    # on the disk: nothing moved, nothing planted, the home really written where it may be
    assert not (home / ".config.moved").exists() and (home / ".config" / "sidekicks" / "data").is_dir()
    assert not (home / ".config" / "sidekicks" / "config.yaml").exists()
    assert not (home / ".config" / "systemd" / "user" / "evil.service").exists()
    assert (home / ".bashrc").read_text() == "# mine\n"
    assert not (site / "uvicorn.py").exists() and not (home / ".local" / "bin" / "bwrap").exists()
    assert not (home / ".ssh" / "authorized_keys").exists()
    assert (home / "notes.txt").read_text() == "pried" and (home / "work.moved").is_dir()
    await running.idle()


async def test_the_owner_s_ssh_key_is_hidden_unless_the_agent_s_read_names_it(
    bridge_factory, homeserver, tmp_path, owner, monkeypatch
):
    home = make_home(tmp_path, monkeypatch)
    prying = [sys.executable, str(PRYING)]
    running = await bridge_factory(
        {
            "alice": {"command": prying, "cwd": "~", "sandbox": "on"},
            "bob": {"command": prying, "cwd": "~", "sandbox": {"read": ["~/.ssh"]}},
        },
        data_dir=tmp_path / "bridge0" / "data",
    )
    key = str(home / ".ssh" / "id_ed25519")
    plan = {"read": [key], "write": [str(home / ".ssh" / "authorized_keys")]}
    hidden = await pry(owner, await open_dm(owner), "@sk_alice:localhost", plan, home)
    assert not hidden["read"][key]["reached"] and not hidden["write"][plan["write"][0]]["reached"]
    named = await pry(owner, await open_dm(owner, "@sk_bob:localhost"), "@sk_bob:localhost", plan, home)
    assert named["read"][key]["reached"] and "PRIVATE KEY" in named["read"][key]["text"]
    assert not named["write"][plan["write"][0]]["reached"]  # named in read: read-only
    assert not (home / ".ssh" / "authorized_keys").exists()
    await running.idle()
