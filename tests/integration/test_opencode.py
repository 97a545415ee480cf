"""A real third-party ACP agent, offline: OpenCode (npm `opencode-ai`) on the shipped SmolLM2.

OpenCode is installed from the npm registry once into the user's cache folder
(`~/.cache/sidekicks/npm/opencode-ai@VERSION`, ~350 MB, ~20 s) and reused by later runs. It talks to
llama-cpp-python's own OpenAI-compatible server (`tests/agents/llm_server.py`: the server
unchanged, plus a log of each request) on 127.0.0.1, and runs with the example config
`deploy/examples/opencode-local.yaml` (only the binary's path, the server's port and a private
HOME differ), so the example is what is tested. No sign-in, no vendor API, no model hub.

- `sidekicks check` lists what OpenCode announces: name, version, loadSession, prompt
  capabilities, its auth method, the model and mode config options, its commands.
- One prompt goes from the owner's Matrix client through Synapse, the bridge, OpenCode and the
  model, and the answer comes back as the puppet's message; the request log shows the owner's
  text reached the model.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import nio
import pytest
import yaml
from bridge_harness import answers_in
from matrix_helpers import events_in, sync_until

from bridge.local.homeserver import free_port

pytestmark = [pytest.mark.model, pytest.mark.thirdparty]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "examples" / "opencode-local.yaml"
LLM_SERVER = ROOT / "tests" / "agents" / "llm_server.py"
OPENCODE_VERSION = "1.18.33"
EXAMPLE_URL = "http://127.0.0.1:8000/v1"  # where the example expects the local server
PUPPET = "@sk_opencode:localhost"
ANSWER_WAIT = 900  # s: the first answer evaluates ~2,200 prompt tokens on a busy 2-core machine


def cache_folder() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "sidekicks" / "npm" / f"opencode-ai@{OPENCODE_VERSION}"


def version_of(binary: Path) -> str | None:
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@pytest.fixture(scope="session")
def opencode_binary() -> Path:
    """The `opencode` of opencode-ai@OPENCODE_VERSION, installed with npm once per machine."""
    folder = cache_folder()
    binary = folder / "node_modules" / ".bin" / "opencode"
    if version_of(binary) == OPENCODE_VERSION:
        return binary
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is needed to install opencode-ai for this test (Debian: apt-get install npm)")
    folder.parent.mkdir(parents=True, exist_ok=True)
    # installed beside and renamed into place: a cut install never looks finished, and two test
    # runs installing at once (two clones on one machine) do not share a folder
    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".partial-", dir=folder.parent))
    try:
        done = subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(staging),
                "--no-fund",
                "--no-audit",
                "--loglevel",
                "error",
                f"opencode-ai@{OPENCODE_VERSION}",
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            pytest.fail(f"npm install opencode-ai@{OPENCODE_VERSION} failed: {done.stderr.strip()[-600:]}")
        if version_of(binary) != OPENCODE_VERSION:  # not there, or a broken one: replace it
            shutil.rmtree(folder, ignore_errors=True)
            try:
                os.replace(staging, folder)
            except OSError:  # another run put its install there first
                pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    found = version_of(binary)
    assert found == OPENCODE_VERSION, f"{binary} --version said {found!r}"
    return binary


class LlmServer:
    def __init__(self, url: str, log: Path, pid: int | None = None):
        self.url, self.log, self.pid = url, log, pid

    def cpu_seconds(self) -> float:
        """The CPU time the server has used (all its threads, /proc): it grows while the model
        evaluates a prompt or writes an answer, and stands still while the server waits."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def requests(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory):
    """llama-cpp-python's server with the shipped SmolLM2 on a free 127.0.0.1 port."""
    folder = tmp_path_factory.mktemp("llm")
    port, log = free_port(), folder / "requests.jsonl"
    with (folder / "server.log").open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, str(LLM_SERVER), "--port", str(port), "--log", str(log)],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(600):  # the model loads in a second or two; a busy machine may take longer
            if process.poll() is not None:
                pytest.fail(f"llm_server exited ({process.returncode}): " + (folder / "server.log").read_text()[-1000:])
            try:
                with urllib.request.urlopen(url + "/models", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("llm_server did not answer /v1/models in 5 minutes")
        yield LlmServer(url, log, process.pid)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def opencode_entry(binary: Path, server: LlmServer, home: Path) -> dict:
    """agents.opencode of the example config, pointed at this test's binary, server and HOME."""
    entry = yaml.safe_load(EXAMPLE.read_text())["agents"]["opencode"]
    assert entry["command"] == ["opencode", "acp"], entry["command"]
    content = entry["env"]["OPENCODE_CONFIG_CONTENT"]
    assert EXAMPLE_URL in content
    entry["command"] = [str(binary), "acp"]
    entry["env"]["OPENCODE_CONFIG_CONTENT"] = content.replace(EXAMPLE_URL, server.url)
    json.loads(entry["env"]["OPENCODE_CONFIG_CONTENT"])  # still opencode's JSON
    # opencode keeps its database, logs and config under HOME (XDG folders): the test's own
    for name, sub in (
        ("HOME", ""),
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_DATA_HOME", ".local/share"),
        ("XDG_STATE_HOME", ".local/state"),
        ("XDG_CACHE_HOME", ".cache"),
    ):
        entry["env"][name] = str(home / sub) if sub else str(home)
    # the example's sandbox: opencode's folders under that HOME writable, nothing else of it
    writes = entry["sandbox"]["write"]
    assert all(path.startswith("~/") for path in writes), writes
    # and its network: the model server's port of the host's 127.0.0.1 (docs/sandbox.md "The network")
    assert entry["sandbox"]["network"] == {"host_ports": [urlsplit(EXAMPLE_URL).port], "internet": False}
    entry["sandbox"] = {
        "write": [str(home / path[2:]) for path in writes],
        "network": {"host_ports": [urlsplit(server.url).port], "internet": False},
    }
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    entry["cwd"] = str(work)
    return entry


def test_check_lists_what_opencode_announces(opencode_binary, llm_server, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "owner": "@me:localhost",
                "homeserver": {"url": "http://127.0.0.1:1", "domain": "localhost"},
                "agents": {"opencode": opencode_entry(opencode_binary, llm_server, tmp_path / "home")},
            }
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "bridge", "check", "-c", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stdout.splitlines()
    [head] = [line for line in lines if line.startswith(("✓ opencode:", "✗ opencode:"))]
    assert head.startswith(f"✓ opencode: OpenCode {OPENCODE_VERSION}; loadSession: yes; commands: "), head
    commands = head.split("commands: ", 1)[1].split(", ")
    assert {"/init", "/review"} <= set(commands), head
    details = [line.strip() for line in lines[lines.index(head) + 1 :] if line.startswith("    ")]
    assert "protocol: ACP v1; prompts: text, image, embedded context" in details, details
    assert "auth methods: opencode-login (Login with opencode)" in details, details
    # the example enables only the local provider: one model, the local one, current
    assert 'model "Model" [model]: local/smollm2 "Local llama.cpp/SmolLM2 135M" (current)' in details, details
    assert 'mode "Session Mode" [mode]: build (current), plan' in details, details
    assert llm_server.requests() == []  # announcing costs no model call


async def test_a_prompt_round_trip_through_the_bridge(bridge_factory, opencode_binary, llm_server, tmp_path, owner):
    entry = opencode_entry(opencode_binary, llm_server, tmp_path / "home")
    running = await bridge_factory({"opencode": entry})
    created = await owner.room_create(name="opencode", invite=[PUPPET], preset=nio.RoomPreset.private_chat)
    assert isinstance(created, nio.RoomCreateResponse), created
    room = created.room_id

    def joined() -> bool:
        members = [
            e for e in events_in(owner, room) if e.get("type") == "m.room.member" and e.get("state_key") == PUPPET
        ]
        return bool(members) and members[-1]["content"].get("membership") == "join"

    await sync_until(owner, joined, timeout=60)

    before = len(llm_server.requests())
    marker = "pelican-7781"
    sent = await owner.room_send(
        room, "m.room.message", {"msgtype": "m.text", "body": f"Say hello to {marker} in one short sentence."}
    )
    assert isinstance(sent, nio.RoomSendResponse), sent

    def answered() -> list[dict]:
        found = [m for m in answers_in(events_in(owner, room), PUPPET) if m["msgtype"] != "m.notice"]
        return [
            m for m in found if "getting ready" not in m["body"] and not m["body"].startswith(("💭", "✍️", "🔧", "⏳"))
        ]

    await sync_until(owner, answered, timeout=ANSWER_WAIT)
    [answer] = answered()
    notices = [m["body"] for m in answers_in(events_in(owner, room), PUPPET) if m["msgtype"] == "m.notice"]
    assert not notices, notices  # no crash, no timeout, no "requires authentication"
    assert answer["body"].strip(), answer

    # the owner's text went through opencode to the model, as one streamed chat completion
    asked = [
        r
        for r in llm_server.requests()[before:]
        if r["path"] == "/v1/chat/completions" and marker in (r.get("last_user") or "")
    ]
    assert len(asked) == 1, llm_server.requests()[before:]
    assert asked[0]["model"] == "smollm2" and asked[0]["stream"] is True
    assert asked[0]["roles"][0] == "system"
    # and the title model call the example switches off was not made
    assert len(llm_server.requests()[before:]) == 1, llm_server.requests()[before:]

    # the answer is stored once it is final (what later turns are told)
    channel = running.store.channel_by_room(room)

    def stored() -> bool:
        return any(
            m.role == "agent" and m.sender == "opencode" and answer["event_id"] in m.event_ids and m.text.strip()
            for m in running.store.last_messages(channel.id, 10)
        )

    await sync_until(owner, stored, timeout=60)
    # and the owner can list its commands in the room
    assert {"init", "review"} <= {c["name"] for c in running.store.agent_commands("opencode")}
    listed = await owner.room_send(room, "m.room.message", {"msgtype": "m.text", "body": "!commands"})
    assert isinstance(listed, nio.RoomSendResponse), listed

    def listing() -> list[str]:
        return [m["body"] for m in answers_in(events_in(owner, room), PUPPET) if m["msgtype"] == "m.notice"]

    await sync_until(owner, listing, timeout=60)
    assert "  /init — guided AGENTS.md setup" in listing()[0].splitlines(), listing()
    assert any(line.startswith("  /review — ") for line in listing()[0].splitlines()), listing()
