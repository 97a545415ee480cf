"""`sidekicks up` as a person runs it: embedded Synapse, the owner account, the real local model."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import nio
import pytest
from bridge_harness import answers_in
from matrix_helpers import TestHomeserver, events_in, login, sync_until

from bridge.local.homeserver import free_port


def up_config(folder: Path, agents: str) -> tuple[Path, int, int]:
    """`folder/config.yaml` as a person writes it for `up`: the owner @me:localhost, the embedded
    Synapse and the bridge on free ports, and `agents` (the YAML under `agents:`). The file and
    the two ports."""
    hs_port, as_port = free_port(), free_port()
    config = folder / "config.yaml"
    config.write_text(f"""owner: "@me:localhost"
homeserver: {{embedded: true, port: {hs_port}, domain: localhost}}
appservice: {{listen: "127.0.0.1:{as_port}"}}
agents:
{agents}""")
    return config, hs_port, as_port


def up_homeserver(folder: Path, hs_port: int, as_port: int, password: str) -> TestHomeserver:
    """The Synapse `up` embeds, as the test helpers see it: the owner @me:localhost, no stranger."""
    return TestHomeserver(
        url=f"http://127.0.0.1:{hs_port}",
        domain="localhost",
        as_port=as_port,
        registration_path=folder / "registration.yaml",
        owner_id="@me:localhost",
        owner_password=password,
        stranger_id="",
        stranger_password="",
        folder=folder,
        server=None,  # up's own, not started by the tests
    )


async def start_up(config: Path, xdg: Path) -> tuple[subprocess.Popen, Path]:
    """Start `sidekicks up`; its output goes to a file (a pipe nobody reads would fill up).
    Polls without blocking the event loop (the test's clients live in it)."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(xdg), "PYTHONUNBUFFERED": "1"}
    output = config.parent / f"up-{time.monotonic_ns()}.out"
    with output.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", "up", "-c", str(config)],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        text = output.read_text()
        if "Ctrl-C stops everything" in text:
            return proc, output
        if proc.poll() is not None:
            raise AssertionError("sidekicks up ended early:\n" + text)
        await asyncio.sleep(0.2)
    proc.kill()
    raise AssertionError("sidekicks up not ready in 300 s:\n" + output.read_text())


async def stop_up(proc: subprocess.Popen, output: Path, timeout: float = 120) -> None:
    proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"sidekicks up did not stop within {timeout:g} s:\n" + output.read_text())
        await asyncio.sleep(0.1)
    assert proc.returncode == 0, output.read_text()


async def none_left(marker: str, timeout: float = 60) -> list[int]:
    """Until no process mentions `marker` (children end just after their parent): those left."""
    deadline = time.monotonic() + timeout
    while (found := processes_mentioning(marker)) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return found


def processes_mentioning(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="ignore"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


async def ask(client: nio.AsyncClient, room_id: str, text: str, count: int) -> dict:
    await client.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": text})
    puppet = "@sk_local:localhost"

    def done():
        answers = answers_in(events_in(client, room_id), puppet)
        return (
            len(answers) >= count
            and answers[count - 1]["body"].strip()
            and not any(mark in answers[count - 1]["body"] for mark in ("getting ready", "💭", "✍️"))
        )

    await sync_until(client, done, timeout=180)
    return answers_in(events_in(client, room_id), puppet)[count - 1]


@pytest.mark.model
async def test_up_runs_the_whole_stack_and_the_local_model_answers(tmp_path):
    xdg, sessions = tmp_path / "xdg", tmp_path / "agent-sessions"
    config, hs_port, as_port = up_config(
        tmp_path,
        f"""  local:
    title: Local model
    command: [{sys.executable}, -m, acp.agents.local_model, --sessions, {sessions}, --max-tokens, "48"]
    sandbox: {{write: ["{sessions}"], network: off}}
""",
    )
    proc, out = await start_up(config, xdg)
    output = out.read_text()
    try:
        assert "created your account @me:localhost" in output
        data_dirs = list((xdg / "sidekicks" / "data").iterdir())
        assert len(data_dirs) == 1
        password_file = data_dirs[0] / "owner-password"
        assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
        password = password_file.read_text().strip()
        assert f"password: {password}" in output
        hs = up_homeserver(tmp_path, hs_port, as_port, password)
        owner = await login(hs, "@me:localhost", password)
        try:
            created = await owner.room_create(
                is_direct=True, invite=["@sk_local:localhost"], preset=nio.RoomPreset.trusted_private_chat
            )
            room_id = created.room_id
            answer = await ask(owner, room_id, "Say hello in one short sentence.", 1)
            assert len(answer["body"].strip()) > 0
            assert answer["edits"] >= 1  # streamed: the placeholder was edited into the answer
        finally:
            await owner.close()
    finally:
        await stop_up(proc, out)
    # nothing left running: the homeserver, the bridge and the agent are gone
    assert await none_left(str(data_dirs[0])) == []
    assert await none_left(str(sessions)) == []

    # a second `up` reuses the account and the history
    proc, out = await start_up(config, xdg)
    try:
        assert "created your account" not in out.read_text()
        owner = await login(hs, "@me:localhost", password)
        try:
            answer = await ask(owner, room_id, "And now say goodbye.", 2)
            assert answer["body"].strip()
        finally:
            await owner.close()
    finally:
        await stop_up(proc, out)
    from store import Store

    store = Store.open("sqlite", data_dirs[0])
    try:
        channel = store.channel_by_room(room_id)
        texts = [m.text for m in store.last_messages(channel.id, 10)]
        assert texts[0] == "Say hello in one short sentence." and texts[2] == "And now say goodbye."
        assert len(texts) == 4
    finally:
        store.close()


SCRIPTED = Path(__file__).resolve().parents[1] / "agents" / "scripted_agent.py"


async def test_up_says_an_agent_that_cannot_start_in_the_terminal_and_the_bots_dm(tmp_path):
    """A wrong command path or module name is said once `up` runs — after the banner, which it
    does not delay — in one line with the fix, in the terminal and in the owner's DM with the bot
    (the owner used to learn it from a notice on the first message). The DM is
    encrypted (the default) and the owner logs in only after the terminal said it, as a person
    does: the bot waits for the owner's device, so the client reads the lines."""
    from test_e2ee import e2e_login, unreadable

    xdg = tmp_path / "xdg"
    config, hs_port, as_port = up_config(
        tmp_path,
        f"""  good:
    command: [{sys.executable}, {SCRIPTED}]
  missing:
    command: [no-such-agent-program]
  nomodule:
    command: [{sys.executable}, -m, no_such_agent_module]
""",
    )
    proc, out = await start_up(config, xdg)
    try:
        deadline = time.monotonic() + 120
        while "• checked 3 agents" not in out.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text()
            await asyncio.sleep(0.1)
        lines = out.read_text().splitlines()
        banner = lines.index("Ctrl-C stops everything.")
        said = [line for line in lines if line.startswith("✗ ")]
        assert said == [
            f"✗ agent missing: command `no-such-agent-program` not found — fix agents.missing.command in {config}",
            f"✗ agent nomodule: stops at start (exit code 1: {sys.executable}: No module named "
            f"no_such_agent_module) — fix agents.nomodule.command in {config}; `sidekicks check` shows more",
        ]
        assert all(lines.index(line) > banner for line in said)
        assert "• checked 3 agents: 2 cannot start (also said in your DM with the bridge bot)" in lines
        assert not [line for line in lines if "agent good" in line]

        [data_dir] = list((xdg / "sidekicks" / "data").iterdir())
        password = (data_dir / "owner-password").read_text().strip()
        hs = up_homeserver(tmp_path, hs_port, as_port, password)
        owner, seen = await e2e_login(hs, "@me:localhost", password)
        try:
            # the welcome: the bot's DM and a direct chat with the first agent (docs/using.md
            # "The first minutes"), made once the owner has a device to read them with
            await sync_until(owner, lambda: len(owner.invited_rooms) + len(owner.rooms) >= 2)
            for room_id in list(owner.invited_rooms):
                assert isinstance(await owner.join(room_id), nio.JoinResponse)

            def told(room_id: str) -> list[str]:
                return [
                    e["content"].get("body", "")
                    for e in events_in(owner, room_id)
                    if e.get("type") == "m.room.message" and e.get("sender") == "@sidekicks:localhost"
                ]

            await sync_until(owner, lambda: any(len(told(room_id)) >= 3 for room_id in owner.rooms))
            [dm] = [room_id for room_id in owner.rooms if told(room_id)]
            assert told(dm)[0].startswith("Welcome to Sidekicks")
            assert told(dm)[1:] == [f"⚠️ {line[2:]}" for line in said]
            assert owner.rooms[dm].encrypted and unreadable(seen, dm) == []
        finally:
            await owner.close()
    finally:
        await stop_up(proc, out)
