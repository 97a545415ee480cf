"""The agent sandbox, end to end (docs/sandbox.md): a prying agent (tests/agents/prying_agent.py)
started by the real bridge, on the real Synapse, in real bubblewrap, reaches nothing of the
bridge — not the registration, not the data folder (store, owner password), not the config, not
another process's environment or command line, not the bridge's environment — writes nowhere but
its folders, and still writes its own working directory and gets its tools' socket.

The layout is the hard one: the config, data and agent folders in one tmp folder, which the
agent is given to read (so each hide is what keeps a secret, not the private /tmp).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

import yaml
from bridge_harness import answers_in
from helpers import is_final, open_dm, say
from matrix_helpers import events_in, sync_until

ALICE = "@sk_alice:localhost"
PRYING = Path(__file__).resolve().parents[1] / "agents" / "prying_agent.py"
KEPT = ("PATH", "HOME", "LANG", "TERM")


async def pry(owner, room: str, plan: dict) -> None:
    await say(owner, room, "PRY" + json.dumps(plan) + "PRY")

    def done() -> bool:
        answers = [a for a in answers_in(events_in(owner, room), ALICE) if a["msgtype"] != "m.notice"]
        return any(is_final(a) and "pried:" in a["body"] for a in answers)

    await sync_until(owner, done, timeout=120)


async def test_a_prying_agent_reaches_nothing_of_the_bridge(bridge_factory, homeserver, tmp_path, owner, monkeypatch):
    bridge_secret = secrets.token_hex(16)
    monkeypatch.setenv("SIDEKICKS_TEST_BRIDGE_SECRET", bridge_secret)  # the bridge runs in this process
    work, data, private = tmp_path / "work", tmp_path / "data", tmp_path / "private"
    for folder in (work, data, private):
        folder.mkdir()
    password = secrets.token_urlsafe(12)
    (data / "owner-password").write_text(password + "\n")
    (data / "crypto").mkdir()
    (data / "crypto" / "bot.db").write_text("crypto-" + bridge_secret)
    registration = private / "registration.yaml"  # Synapse's, copied where the agent could look
    registration.write_text(homeserver.registration_path.read_text())
    tokens = yaml.safe_load(registration.read_text())
    appservice = {
        **yaml.safe_load(homeserver.base_config_path.read_text())["appservice"],
        "registration": str(registration),
    }
    config_folder = tmp_path / "bridge0"
    running = await bridge_factory(
        {
            "alice": {
                "command": [sys.executable, str(PRYING)],
                "cwd": str(work),
                "env": {"PRYING_GIVEN": "yes"},
                "sandbox": {"read": [str(tmp_path)]},
            }
        },
        folder=config_folder,
        data_dir=data,
        appservice=appservice,
    )
    store_file = data / "sidekicks.db"
    assert store_file.exists() and (config_folder / "config.yaml").exists()

    room = await open_dm(owner)
    outside = [
        tmp_path / "outside.txt",
        config_folder / "planted.py",
        data / "planted",
        private / "planted",
        Path.home() / f".sidekicks-pried-{bridge_secret[:8]}",
        Path("/etc") / f"sidekicks-pried-{bridge_secret[:8]}",
    ]
    await pry(
        owner,
        room,
        {
            "read": [
                str(registration),
                str(homeserver.registration_path),
                str(config_folder / "config.yaml"),
                str(data / "owner-password"),
                str(store_file),
                str(data / "crypto" / "bot.db"),
                f"/proc/{os.getpid()}/environ",
                f"/proc/{os.getppid()}/environ",
            ],
            "list": [str(data), str(config_folder), str(data / "crypto")],
            "write": [str(p) for p in outside],
            "pid": os.getpid(),
        },
    )
    report = json.loads((work / "pried.json").read_text())  # written by the agent: its folder is its own
    text = json.dumps(report)

    for part in ("read", "list", "write"):
        reached = {path: found for path, found in report[part].items() if found["reached"]}
        if part == "list":  # in the data folder it sees its tools' socket, bound in, and nothing else
            assert reached.pop(str(data), {}).get("entries", []) in ([], ["mcp.sock"]), reached
        assert not reached, f"{part}: {reached}"
    for path in outside:
        assert not path.exists(), path
    for secret in (tokens["as_token"], tokens["hs_token"], password, bridge_secret):
        assert secret not in text
    # its own processes only: the sandbox's (bwrap, the agent), no other process's environ
    for pid, found in report["proc"].items():
        command = found["cmdline"].get("text", "").split(" ")
        assert command == [""] or command[0].endswith("bwrap") or str(PRYING) in command, (pid, command)
    assert str(os.getpid()) not in [p for p, f in report["proc"].items() if f["cmdline"]["reached"]]
    # its environment: what the config gave it, four of the bridge's, and PWD (bwrap sets it)
    assert report["env"].pop("PWD", str(work)) == str(work)
    assert set(report["env"]) == {"PRYING_GIVEN"} | {name for name in KEPT if name in os.environ}, report["env"]
    assert report["cwd"] == str(work)
    # the data folder really is there, full, for the bridge
    assert (data / "owner-password").read_text().strip() == password
    await running.idle()
