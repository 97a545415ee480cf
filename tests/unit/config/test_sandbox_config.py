"""`sandbox:` of an agent (docs/sandbox.md): on by default, off, or {write, read, network}.
Every problem one line; unknown keys refused naming the closest known one. And what the bridge
makes of it (bridge/agent_specs.py): what is writable, what is hidden."""

from __future__ import annotations

import pytest
import yaml
from config_files import BASE, agent_problems, refused, write_agent

import config
from bridge.agent_specs import sandbox_line, sandbox_of, spec_of, unsandboxed
from config.model import SandboxConfig


def test_on_by_default_and_on_off_as_yaml_writes_them(tmp_path):
    assert config.load(write_agent(tmp_path, {})).agents["alice"].sandbox == SandboxConfig()
    for value, on in ((True, True), (False, False), ("on", True), ("off", False), ("OFF", False)):
        assert config.load(write_agent(tmp_path, {"sandbox": value})).agents["alice"].sandbox.on is on
    # YAML's own on/off, unquoted
    path = tmp_path / "config.yaml"
    path.write_text("owner: '@me:localhost'\nagents:\n  alice: {command: [x], sandbox: off}\n")
    assert config.load(path).agents["alice"].sandbox.on is False


def test_a_mapping_names_paths_and_the_network(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    box = (
        config.load(
            write_agent(tmp_path, {"sandbox": {"write": ["~/.claude", "state"], "read": "~/models", "network": "off"}})
        )
        .agents["alice"]
        .sandbox
    )
    assert box == SandboxConfig(
        on=True,
        write=(str(tmp_path / "home" / ".claude"), str(tmp_path / "state")),
        read=(str(tmp_path / "home" / "models"),),
        network=False,
    )
    assert config.load(write_agent(tmp_path, {"sandbox": {}})).agents["alice"].sandbox == SandboxConfig()


def test_bad_values_one_line_each(tmp_path):
    assert agent_problems(tmp_path, {"sandbox": "maybe"}) == [
        "agents.alice.sandbox: must be on, off or a mapping like {write: [~/.claude], network: on}, got 'maybe'"
    ]
    assert agent_problems(tmp_path, {"sandbox": {"write": [1], "read": {"a": 1}, "network": "sometimes"}}) == [
        "agents.alice.sandbox.write: must be a list of paths, like [~/.claude, ~/models]",
        "agents.alice.sandbox.read: must be a list of paths, like [~/.claude, ~/models]",
        "agents.alice.sandbox.network: must be on or off, got 'sometimes'",
    ]
    assert agent_problems(tmp_path, {"sandbox": {"write": ["/"]}}) == [
        "agents.alice.sandbox.write: must not be / (that is the whole system: use sandbox: off)"
    ]


def test_unknown_keys_are_refused_naming_the_closest(tmp_path):
    assert agent_problems(tmp_path, {"sandbox": {"writes": ["a"], "netwrk": "off"}}) == [
        "agents.alice.sandbox.netwrk: unknown key — did you mean network?",
        "agents.alice.sandbox.writes: unknown key — did you mean write?",
    ]
    assert agent_problems(tmp_path, {"sandbx": "off"}) == ["agents.alice.sandbx: unknown key — did you mean sandbox?"]


def test_a_bad_sandbox_stops_the_command_line_with_exit_2(tmp_path):
    path = write_agent(tmp_path, {"sandbox": {"network": "maybe"}})
    lines = refused("check", path)
    assert lines[-1].endswith("agents.alice.sandbox.network: must be on or off, got 'maybe'"), lines


# ---- what the bridge makes of it (bridge/agent_specs.py) ---------------------------------------


def test_the_sandbox_writes_cwd_roots_worktrees_and_config_paths_and_hides_the_bridge(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "sub").mkdir()
    (tmp_path / "notes").mkdir()
    cfg = config.load(
        write_agent(
            tmp_path,
            {
                "cwd": "repo/sub",
                "roots": ["repo/sub", "notes"],
                "worktrees": "on",
                "sandbox": {"write": ["state"], "read": ["models"]},
            },
        )
    )
    box = sandbox_of(cfg, cfg.agents["alice"])
    assert box.write == (
        str(repo / "sub"),
        str(tmp_path / "notes"),
        str(repo),
        str(repo) + ".worktrees",
        str(tmp_path / "state"),
    )
    assert box.read == (str(tmp_path / "models"),)
    assert box.hide == (
        str(tmp_path),
        str(tmp_path / "config.yaml"),
        str(cfg.data_dir),
        str(tmp_path / "registration.yaml"),
    )
    assert box.network is True and box.reach == ()
    assert spec_of(cfg, "alice").sandbox == box
    assert unsandboxed(cfg, "alice") is None
    assert sandbox_line(cfg, "alice").startswith(f"on; writes {repo / 'sub'}, ")


def test_off_and_ssh_have_no_sandbox_and_say_why(tmp_path):
    cfg = config.load(write_agent(tmp_path, {"sandbox": "off"}))
    assert sandbox_of(cfg, cfg.agents["alice"]) is None and spec_of(cfg, "alice").sandbox is None
    assert sandbox_line(cfg, "alice") == "off (agents.alice.sandbox: off): it reaches what the bridge reaches"
    assert "agents.alice.sandbox: off" in unsandboxed(cfg, "alice")
    remote = config.load(write_agent(tmp_path, {"command": ["ssh", "-o", "BatchMode=yes", "box", "agent"]}))
    assert sandbox_of(remote, remote.agents["alice"]) is None
    assert sandbox_line(remote, "alice") == (
        "remote over ssh to box (not sandboxed by the bridge; files it names are not read here)"
    )
    assert "ssh" in unsandboxed(remote, "alice")


def test_an_ssh_config_file_an_agent_can_write_is_refused(tmp_path):
    """docs/sandbox.md "Agents on other hosts": ssh would run what that file says, as the bridge."""
    work, safe = tmp_path / "work", tmp_path / "safe"
    work.mkdir()
    safe.mkdir()
    path = tmp_path / "config.yaml"

    def agents(file: str) -> dict:
        return {
            "near": {"command": ["x"], "cwd": str(work)},
            "far": {"command": ["ssh", "-F", file, "box", "agent"]},
        }

    path.write_text(yaml.safe_dump({**BASE, "agents": agents(str(work / "ssh_config"))}))
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    assert caught.value.problems == [
        f"{path}: agents.far.command: its ssh config {work / 'ssh_config'} lies in {work}, which agent near "
        "can write (and so make ssh run any program as the bridge): move the file out of every agent's folders"
    ]
    path.write_text(yaml.safe_dump({**BASE, "agents": agents(str(safe / "ssh_config"))}))
    assert config.load(path).agents["far"].command[2] == str(safe / "ssh_config")
