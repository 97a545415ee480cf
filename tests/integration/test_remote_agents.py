"""Agents on other hosts, end to end (docs/configuration.md "Agents on other hosts"): the real
bridge runs `ssh` to a real OpenSSH server (tests/ssh_host.py: Debian's sshd on 127.0.0.2, its
own keys), which runs a scripted agent in a folder of its own that the bridge's config never
names. Session, streaming, a permission answered, `!stop`, a restart carried on by
`session/load`, the connection cut and the server gone (one line with ssh's own reason), files
named by path refused and embedded files posted, `send_file` refused, `sidekicks check`.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bridge_harness import SCRIPTED, answers_in, write_config
from helpers import ALICE, BOB, is_final, open_dm, received, say
from matrix_helpers import events_in, sync_until
from ssh_host import SshHost, available

MCP_AGENT = Path(__file__).resolve().parents[1] / "agents" / "mcp_agent.py"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def other_host(tmp_path_factory):
    """sshd on 127.0.0.2 for the module's tests (a test that stops it starts it again)."""
    missing = available()
    assert missing is None, f"{missing} (./sidekicks test installs it)"
    host = SshHost(tmp_path_factory.mktemp("other-host") / "sshd")
    host.start()
    try:
        yield host
    finally:
        host.stop()


@pytest.fixture
def work(tmp_path_factory) -> Path:
    """The agent's folder on the other host: in no folder the bridge's config names."""
    return tmp_path_factory.mktemp("remote-work")


def remote(host: SshHost, workdir: Path, *options: str, program: Path = SCRIPTED, **extra) -> dict:
    """agents.<name> running `program` on the other host, in `workdir`. `sandbox: on` as given,
    so the harness adds no write: path naming the test's folders (a remote agent has none)."""
    return {"command": host.command(workdir, [sys.executable, str(program), *options]), "sandbox": True, **extra}


def messages(owner, room_id, sender=ALICE) -> list[dict]:
    return answers_in(events_in(owner, room_id), sender)


def answers(owner, room_id, sender=ALICE) -> list[dict]:
    """`sender`'s answers: not notices, not permission prompts, not media."""
    return [
        m
        for m in messages(owner, room_id, sender)
        if m["msgtype"] in ("m.text", None) and "asks permission" not in m["history"][0]
    ]


def notices(owner, room_id, sender=ALICE) -> list[str]:
    return [m["body"] for m in messages(owner, room_id, sender) if m["msgtype"] == "m.notice"]


async def answer(owner, room_id, text, sender=ALICE) -> str:
    """Say `text`; the final body of `sender`'s next answer."""
    before = len(answers(owner, room_id, sender))
    await say(owner, room_id, text)

    def done():
        found = answers(owner, room_id, sender)
        return len(found) > before and is_final(found[before])

    await sync_until(owner, done, timeout=90)
    return answers(owner, room_id, sender)[before]["body"]


async def shown_unfinished(owner, room_id, text: str, count: int) -> None:
    """Until answer number `count` (from 1) shows `text` while still being written."""

    def seen():
        found = answers(owner, room_id)
        return len(found) >= count and text in found[count - 1]["body"] and not is_final(found[count - 1])

    await sync_until(owner, seen, timeout=90)


def calls(log: Path, method: str) -> list[dict]:
    return [m["params"] for m in received(log) if m.get("method") == method]


def ssh_lines(host: SshHost) -> list[list[str]]:
    """The command lines of the ssh clients running here that go to `host` (read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            words = Path(f"/proc/{entry}/cmdline").read_bytes().decode().split("\0")[:-1]
        except (OSError, ValueError):
            continue
        if words and os.path.basename(words[0]) == "ssh" and str(host.key) in words:
            found.append(words)
    return found


def no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text and "\n" not in text.strip(), text


async def test_an_agent_on_another_host_answers_streams_asks_and_stops(bridge_factory, other_host, work, owner):
    log = work / "alice.log"
    await bridge_factory({"alice": remote(other_host, work, "--log", str(log))})
    room = await open_dm(owner, ALICE)

    # it runs there: through that sshd, in its own folder
    assert await answer(owner, room, "[[cwd]]") == str(work)
    # the ssh the bridge runs reads no ssh config file (docs/sandbox.md "Agents on other hosts")
    lines = ssh_lines(other_host)
    assert len(lines) == 1 and lines[0][:3] == ["ssh", "-F", "/dev/null"], lines
    assert lines[0][3:] == other_host.command(work, [sys.executable, str(SCRIPTED), "--log", str(log)])[1:]
    connection = (await answer(owner, room, "[[env:SSH_CONNECTION]]")).split()
    assert connection[2:] == [other_host.address, str(other_host.port)]

    # streaming: the first part is shown while the agent still works on the rest
    release = work / "release"
    await say(owner, room, f"[[answer:first part, then the rest]] [[chunks:2]] [[hold:{release}]]")
    await shown_unfinished(owner, room, "first part", 3)
    release.touch()
    await sync_until(owner, lambda: is_final(answers(owner, room)[2]))
    assert answers(owner, room)[2]["body"] == "first part, then the rest"
    assert answers(owner, room)[2]["edits"] >= 1

    # a permission prompt, answered with a number
    await say(owner, room, "[[permission]] write notes")
    await sync_until(owner, lambda: any("asks permission" in m["history"][0] for m in messages(owner, room)))
    await say(owner, room, "1")  # the answer, not a prompt: the waiting turn's answer ends "allowed"
    await sync_until(owner, lambda: [a["body"] for a in answers(owner, room)][3:] == ["allowed"])
    outcomes = [m["result"]["outcome"] for m in received(log) if "outcome" in (m.get("result") or {})]
    assert outcomes == [{"outcome": "selected", "optionId": "allow_once"}]

    # !stop: session/cancel reaches the agent over the link, and the answer says it stopped
    await say(owner, room, f"[[hold:{work / 'never'}]] stop me")
    await shown_unfinished(owner, room, "stop me", 5)
    await say(owner, room, "!stop")
    await sync_until(owner, lambda: is_final(answers(owner, room)[4]))
    assert answers(owner, room)[4]["body"].endswith("⏹ stopped")
    await sync_until(owner, lambda: calls(log, "session/cancel"))
    ended = [m["stopReason"] for m in received(log) if m.get("scripted") == "prompt ended"]
    assert ended[-1] == "cancelled"


async def test_a_restart_carries_the_remote_session_on_with_session_load(
    bridge_factory, other_host, work, tmp_path, owner
):
    log, folder = work / "alice.log", tmp_path / "bridge"
    alice = remote(other_host, work, "--load-session", "--state", str(work / "sessions"), "--log", str(log))
    running = await bridge_factory({"alice": alice}, folder=folder)
    room = await open_dm(owner, ALICE)
    assert await answer(owner, room, "one") == "echo: one"
    channel = running.store.channel_by_room(room)
    session_id = running.store.member(channel.id, "alice").session_id
    await running.idle()
    await running.stop()

    await bridge_factory({"alice": alice}, folder=folder)
    assert await answer(owner, room, "[[session]]") == f"session {session_id}, prompt 2"
    assert [c["sessionId"] for c in calls(log, "session/load")] == [session_id]
    assert len(calls(log, "session/new")) == 1


async def test_a_dead_connection_is_said_in_one_line_with_sshs_reason(bridge_factory, other_host, work, owner):
    log = work / "alice.log"
    alice = remote(other_host, work, "--load-session", "--state", str(work / "sessions"), "--log", str(log))
    await bridge_factory({"alice": alice})
    room = await open_dm(owner, ALICE)
    assert await answer(owner, room, "one") == "echo: one"
    where = f"{other_host.address}"
    try:
        # the link dies mid-answer (sshd's side of the connection killed)
        await say(owner, room, f"[[hold:{work / 'never'}]] two")
        await shown_unfinished(owner, room, "two", 2)
        assert other_host.kill_sessions() >= 1
        await sync_until(owner, lambda: is_final(answers(owner, room)[1]), timeout=90)
        # what ssh says when the other end goes (while quiet: "closed by remote host"; had the
        # bridge been writing at that moment, the reset or broken pipe ssh saw)
        body = answers(owner, room)[1]["body"]
        lost = "alice: " + body.split("⚠️ interrupted: alice: ", 1)[-1]
        assert lost in (
            f"alice: the ssh connection to {where} failed: Connection to {where} closed by remote host",
            f"alice: the ssh connection to {where} failed: client_loop: send disconnect: Broken pipe",
            f"alice: the ssh connection to {where} failed: Read from remote host {where}: Connection reset by peer",
        ), body
        await sync_until(owner, lambda: notices(owner, room))
        assert notices(owner, room) == [f"⚠️ {lost}. The next message starts it again."]

        # the server is gone: the next message says ssh's reason, in one line
        other_host.stop()
        refused = await answer(owner, room, "three")
        assert refused == (
            f"⚠️ alice: the ssh connection to {where} failed: "
            f"ssh: connect to host {where} port {other_host.port}: Connection refused"
        )
        no_traceback(refused, *notices(owner, room))
    finally:
        other_host.start()

    # back: the next message is answered, in the same session
    assert (await answer(owner, room, "[[session]]")).startswith("session ")
    assert len(calls(log, "session/new")) == 1


async def test_files_a_remote_agent_names_are_refused_its_embedded_files_posted(
    bridge_factory, other_host, work, owner
):
    report = work / "report.txt"
    report.write_text("quarterly numbers\n")  # readable from here too: refused all the same
    chart = work / "chart.png"
    chart.write_bytes(
        base64.b64decode(
            b"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
        )
    )
    bob_log = work / "bob.log"
    agents = {
        "alice": remote(other_host, work),
        "bob": remote(other_host, work, "--log", str(bob_log), program=MCP_AGENT),
    }
    await bridge_factory(agents)
    room = await open_dm(owner, ALICE)
    refused = (
        "alice runs on 127.0.0.2 over ssh: the files it names are there, not on this machine, so the "
        "bridge reads none of them; the agent can send the content itself (an ACP resource with text or blob)"
    )

    def media():
        return [m for m in messages(owner, room) if m["msgtype"] in ("m.file", "m.image")]

    # a file:// link: refused in one line (the answer goes on in a message after its text)
    await say(owner, room, f"[[link:{report}]]")
    line = f"⚠️ [file: report.txt] could not be posted: {refused}"
    await sync_until(owner, lambda: any(m["body"].strip() == line and is_final(m) for m in messages(owner, room)))
    # embedded, as text and as a blob: posted
    await say(owner, room, f"[[embed:{report}]]")
    await sync_until(owner, lambda: len(media()) == 1)
    await say(owner, room, f"[[blob:{chart}]]")
    await sync_until(owner, lambda: len(media()) == 2)
    posted = [
        (e["content"]["msgtype"], e["content"]["body"], e["content"]["info"]["size"])
        for e in events_in(owner, room)
        if e.get("sender") == ALICE and e["content"].get("msgtype") in ("m.file", "m.image")
    ]
    assert posted == [("m.file", "report.txt", 18), ("m.image", "chart.png", chart.stat().st_size)]

    # send_file of the MCP tools: the same refusal, said to the agent
    bob_room = await open_dm(owner, BOB)
    said = await answer(owner, bob_room, '[[tool:send_file {"path": "report.txt"}]]', sender=BOB)
    assert said == f"send_file error: report.txt was not posted: {refused.replace('alice', 'bob', 1)}"
    assert not [e for e in events_in(owner, bob_room) if e["content"].get("msgtype") == "m.file"]


def test_check_says_which_agents_are_remote(homeserver, other_host, work, tmp_path):
    path = write_config(
        homeserver,
        tmp_path / "bridge",
        {
            "alice": remote(other_host, work, "--name", "far-scripted"),
            "local": {"command": [sys.executable, str(SCRIPTED)]},
        },
    )
    result = subprocess.run(
        [sys.executable, "-m", "bridge", "check", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("✓ alice: far-scripted") for line in lines), result.stdout
    sandbox = {line.split("sandbox:", 1)[1].strip() for line in lines if line.strip().startswith("sandbox:")}
    assert (
        f"remote over ssh to {other_host.address} (not sandboxed by the bridge; files it names are not read here)"
        in sandbox
    )
    assert any(line.startswith("on;") for line in sandbox)
