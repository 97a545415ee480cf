"""A sandboxed agent's network and host sockets, and its end with the bridge (docs/sandbox.md "The
network", "Ending with the bridge"): real bubblewrap, real slirp4netns, a real agent process
started by the bridge's own code (acp/process.py), probing from inside.

- the host's 127.0.0.1 is out of reach, network on and off; a port the agent binds is not the
  host's; no path socket under /run (PostgreSQL's folder included) and no abstract socket
  connects;
- with `network: on` "the internet" answers (a listener on a non-loopback address of this
  machine stands for it), and a port named in `host_ports` is the agent's own 127.0.0.1:N;
- a bridge killed with -9 leaves no agent process, even one that ignores EOF and SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from acp.process import AgentProcess
from acp.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[2]

# the probe: connects where the plan says ([host, port] or a unix socket path, "\0…" abstract),
# then sends "ping" and reads the answer; prints one JSON line of what each got
PROBE = """
import json, socket, sys

def reach(where):
    if isinstance(where, list):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        where = tuple(where)
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.connect(where)
    except OSError as exc:
        s.close()
        return f"{type(exc).__name__}: {exc}"
    try:
        s.sendall(b"ping")
        return "connected, answered: " + s.recv(100).decode()
    except OSError as exc:
        return f"connected, then {type(exc).__name__}: {exc}"
    finally:
        s.close()

plan = json.loads(sys.argv[1])
print(json.dumps({name: reach(where) for name, where in plan.items()}), flush=True)
"""


async def probe(tmp_path: Path, plan: dict, network: bool = True, host_ports: tuple[int, ...] = ()) -> dict:
    """What a sandboxed agent reaches of `plan` (name → address)."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    box = Sandbox(write=(str(work),), network=network, host_ports=host_ports)
    agent = AgentProcess("probe", [sys.executable, "-c", PROBE, json.dumps(plan)], str(work), sandbox=box)
    await agent.start()
    try:
        line = await asyncio.wait_for(agent.stdout.readline(), 120)
        assert line, await agent.stderr_settled()
        return json.loads(line)
    finally:
        await agent.stop()


async def pong(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    data = await reader.read(100)
    writer.write(b"pong " + data)
    await writer.drain()
    writer.close()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def outside_address() -> str | None:
    """An IPv4 address of this machine that is not loopback, standing for the internet."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            return parts[parts.index("inet") + 1].split("/")[0]
    return None


def unix_listener(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(8)
    return s


@pytest.mark.parametrize("network", [True, False], ids=["network-on", "network-off"])
async def test_no_host_loopback_and_no_host_socket_is_reachable(tmp_path, network):
    port = free_port()
    server = await asyncio.start_server(pong, "127.0.0.1", port)
    name = f"sk-test-{secrets.token_hex(4)}"
    run_folder = Path(tempfile.mkdtemp(prefix="sk-test-", dir="/run"))  # a host socket under /run
    postgres = Path("/var/run/postgresql")  # where PostgreSQL listens, peer authentication
    made_postgres = not postgres.exists()
    postgres.mkdir(exist_ok=True)
    sockets = [
        unix_listener(str(run_folder / "service.sock")),
        unix_listener(f"\0{name}"),
        unix_listener(str(postgres / f".s.PGSQL.{port}")),
    ]
    try:
        plan = {
            "loopback": ["127.0.0.1", port],
            "run": str(run_folder / "service.sock"),
            "abstract": f"\0{name}",
            "postgresql": str(postgres / f".s.PGSQL.{port}"),
        }
        # the host itself reaches each of them: what the agent does not is the sandbox's doing
        for where in plan.values():
            family = socket.AF_INET if isinstance(where, list) else socket.AF_UNIX
            with socket.socket(family) as s:
                s.connect(tuple(where) if isinstance(where, list) else where)
        found = await probe(tmp_path, plan, network=network)
        assert not [what for what, got in found.items() if got.startswith("connected")], found
    finally:
        server.close()
        for s in sockets:
            s.close()
        os.unlink(run_folder / "service.sock")
        os.unlink(postgres / f".s.PGSQL.{port}")
        run_folder.rmdir()
        if made_postgres:
            postgres.rmdir()


async def test_a_port_bound_inside_is_not_the_host_s(tmp_path):
    port = free_port()
    work = tmp_path / "work"
    work.mkdir()
    code = (
        "import socket, sys\n"
        f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(8)\n"
        "print('bound', flush=True)\n"
        "sys.stdin.read()\n"
    )
    agent = AgentProcess("binder", [sys.executable, "-c", code], str(work), sandbox=Sandbox(write=(str(work),)))
    await agent.start()
    try:
        assert await asyncio.wait_for(agent.stdout.readline(), 120) == b"bound\n", await agent.stderr_settled()
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=10):
            pass
    finally:
        await agent.stop()


async def test_the_internet_answers_with_the_network_on(tmp_path):
    address = outside_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to stand for the internet")
    server = await asyncio.start_server(pong, address, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        found = await probe(tmp_path, {"internet": [address, port]})
        assert found == {"internet": "connected, answered: pong ping"}
        off = await probe(tmp_path, {"internet": [address, port]}, network=False)
        assert not off["internet"].startswith("connected"), off
    finally:
        server.close()


@pytest.mark.parametrize("network", [True, False], ids=["network-on", "network-off"])
async def test_a_named_host_port_is_the_agent_s_own_127_0_0_1(tmp_path, network):
    # (network off: how the bridge's MCP server over HTTP reaches an agent without the internet)
    named, other = free_port(), free_port()
    servers = [await asyncio.start_server(pong, "127.0.0.1", p) for p in (named, other)]
    try:
        plan = {"named": ["127.0.0.1", named], "other": ["127.0.0.1", other]}
        found = await probe(tmp_path, plan, network=network, host_ports=(named,))
        assert found["named"] == "connected, answered: pong ping"
        assert not found["other"].startswith("connected"), found
    finally:
        for server in servers:
            server.close()


# a "bridge": the bridge's own code starting one sandboxed agent that ignores EOF and SIGTERM
BRIDGE = """
import asyncio, sys
from acp.process import AgentProcess
from acp.sandbox import Sandbox

work, marker, network = sys.argv[1], sys.argv[2], sys.argv[3] == "on"
AGENT = "import signal, sys, time\\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\\nprint('up', flush=True)\\n"
AGENT += "sys.stdin.read()\\nwhile True:\\n    time.sleep(1)\\n"

async def main():
    agent = AgentProcess("stubborn", [sys.executable, "-c", AGENT, marker], work,
                         sandbox=Sandbox(write=(work,), network=network))
    await agent.start()
    print((await agent.stdout.readline()).decode().strip(), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def marked(marker: str) -> list[int]:
    """The processes whose command line holds `marker` (the agent, and bwrap running it)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.parametrize("network", ["on", "off"], ids=["network-on", "network-off"])
def test_a_bridge_killed_with_9_leaves_no_agent_process(tmp_path, network):
    marker = f"sk-agent-{secrets.token_hex(6)}"
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bridge = subprocess.Popen(
        [sys.executable, "-c", BRIDGE, str(work), marker, network], stdout=subprocess.PIPE, env=env
    )
    try:
        assert bridge.stdout is not None and bridge.stdout.readline() == b"up\n"
        assert marked(marker), "the agent runs"
        bridge.kill()
        bridge.wait()
        deadline = time.monotonic() + 120
        while marked(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = marked(marker)
        assert left == [], f"outlived the bridge: {left}"
    finally:
        if bridge.poll() is None:
            bridge.kill()
            bridge.wait()
        for pid in marked(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
