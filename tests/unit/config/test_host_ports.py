"""`sandbox: {network: {host_ports: [N]}}` (docs/sandbox.md "The network"): the host's
127.0.0.1:N seen as the agent's own; never the homeserver's, the appservice's or the store's
port — the config is refused in one line naming it (exit 2)."""

from __future__ import annotations

import yaml
from config_files import BASE, agent_problems, refused, write_agent

import config
from bridge.agent_specs import sandbox_line, sandbox_of


def test_named_ports_keep_the_network_on(tmp_path):
    cfg = config.load(write_agent(tmp_path, {"sandbox": {"network": {"host_ports": [8080, 11434, 8080]}}}))
    box = cfg.agents["alice"].sandbox
    assert box.network is True and box.host_ports == (8080, 11434)
    assert sandbox_of(cfg, cfg.agents["alice"]).host_ports == (8080, 11434)
    assert "reaches the host's ports 8080, 11434" in sandbox_line(cfg, "alice")
    assert config.load(write_agent(tmp_path, {"sandbox": {"network": "on"}})).agents["alice"].sandbox.host_ports == ()


def test_the_internet_may_be_left_out(tmp_path):
    cfg = config.load(write_agent(tmp_path, {"sandbox": {"network": {"host_ports": [8000], "internet": "off"}}}))
    box = cfg.agents["alice"].sandbox
    assert box.network is False and box.host_ports == (8000,)
    assert sandbox_of(cfg, cfg.agents["alice"]).host_ports == (8000,)
    assert "network off; reaches the host's ports 8000" in sandbox_line(cfg, "alice")


def test_bad_ports_and_unknown_keys_one_line_each(tmp_path):
    assert agent_problems(tmp_path, {"sandbox": {"network": {"host_ports": ["x", 70000]}}}) == [
        "agents.alice.sandbox.network.host_ports: must be a list of port numbers, like [8080]"
    ]
    assert agent_problems(tmp_path, {"sandbox": {"network": {"host_port": [1]}}}) == [
        "agents.alice.sandbox.network.host_port: unknown key — did you mean host_ports?"
    ]


def test_the_homeserver_s_the_appservice_s_and_the_store_s_ports_are_refused(tmp_path):
    # BASE's homeserver is http://127.0.0.1:8008; the appservice listens on 29333 by default
    assert agent_problems(tmp_path, {"sandbox": {"network": {"host_ports": [8008, 29333]}}}) == [
        "agents.alice.sandbox.network.host_ports: 8008 is the homeserver's port: no agent may reach it — remove it",
        "agents.alice.sandbox.network.host_ports: 29333 is the appservice's port: no agent may reach it — remove it",
    ]
    path = tmp_path / "config.yaml"
    store = {"database": "postgresql://sk:pw@127.0.0.1:5433/sk"}
    agents = {"alice": {"command": ["x"], "sandbox": {"network": {"host_ports": [5433]}}}}
    path.write_text(yaml.safe_dump({**BASE, **store, "agents": agents}))
    assert refused("check", path) == [
        f"{path}: agents.alice.sandbox.network.host_ports: 5433 is the store's (PostgreSQL) port: "
        "no agent may reach it — remove it"
    ]


def test_the_bridge_s_mcp_server_over_http_is_forwarded_into_every_sandbox(tmp_path):
    from bridge.agent_specs import reach_socket, specs

    path = tmp_path / "config.yaml"
    agents = {
        "on": {"command": ["x"], "sandbox": {"network": {"host_ports": [8080]}}},
        "off": {"command": ["x"], "sandbox": {"network": "off"}},
        "open": {"command": ["x"], "sandbox": "off"},
    }
    path.write_text(yaml.safe_dump({**BASE, "agents": agents}))
    found = specs(config.load(path))
    reach_socket(found, str(tmp_path / "mcp.sock"), "http://127.0.0.1:41234/mcp")
    assert found["on"].sandbox.host_ports == (8080, 41234)
    assert found["off"].sandbox.host_ports == (41234,) and found["off"].sandbox.network is False
    assert found["open"].sandbox is None
