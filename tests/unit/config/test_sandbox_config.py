"""`sandbox:` of an agent (docs/sandbox.md): on by default, off, or {write, read, network}.
Every problem one line; unknown keys refused naming the closest known one. And what the bridge
makes of it (bridge/agent_specs.py): what is writable, what is hidden."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from config_files import BASE, agent_problems, refused, write_agent

import config
from acp.sandbox import HIDE_DIR, HIDE_FILE, PIN, READ, WRITE, mounts, under
from bridge.agent_specs import home_warning, sandbox_line, sandbox_of, spec_of, unsandboxed
from bridge.local.up import write_default_config
from config.model import SandboxConfig

ROOT = Path(__file__).resolve().parents[3]


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
    assert box.hide[:5] == (
        str(tmp_path),
        str(tmp_path / "config.yaml"),
        str(cfg.data_dir),
        str(config.user_config_root()),  # every config's data folder
        str(tmp_path / "registration.yaml"),
    )
    assert os.path.expanduser("~/.ssh") in box.hide  # the owner's credential stores
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


# ---- cwd (docs/sandbox.md "A working directory on purpose") ------------------------------


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A home folder of the test's own, with the files an agent writing it must not change."""
    home = tmp_path / "home"
    for folder in (".config/systemd/user", ".ssh", ".local/bin"):
        (home / folder).mkdir(parents=True)
    (home / ".bashrc").write_text("# mine\n")
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{home / '.local' / 'bin'}{os.pathsep}{os.environ['PATH']}")  # as the units set it
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home


def test_a_quoted_tilde_is_the_home_folder_and_a_bare_one_is_refused(tmp_path, home):
    assert config.load(write_agent(tmp_path, {"cwd": "~"})).agents["alice"].cwd == str(home)
    empty = 'is empty (a bare ~ is empty in YAML: write cwd: "~" for the home folder, or leave cwd out'
    path = tmp_path / "config.yaml"
    path.write_text("owner: '@me:localhost'\nagents:\n  alice: {command: [x], cwd: ~}\n")
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    assert caught.value.problems == [f"{path}: agents.alice.cwd: {empty} for a folder of the agent's own)"]
    assert agent_problems(tmp_path, {"cwd": ""}) == [f"agents.alice.cwd: {empty} for a folder of the agent's own)"]
    lines = refused("check", path)
    assert lines[-1].endswith("for a folder of the agent's own)"), lines


def test_without_cwd_an_agent_works_in_a_folder_of_its_own(tmp_path, home):
    cfg = config.load(write_agent(tmp_path, {}))
    own = cfg.data_dir / "agents" / "alice"
    spec = spec_of(cfg, "alice")
    assert spec.cwd == str(own) != os.getcwd() and own.is_dir()
    for level in (own, own.parent, cfg.data_dir):  # made private: the data folder holds secrets
        assert level.stat().st_mode & 0o777 == 0o700, level
    assert spec.sandbox.write == (str(own),)
    assert sandbox_line(cfg, "alice") == f"on; writes {own}; network on"


def test_check_warns_of_an_agent_that_writes_the_home_folder(tmp_path, home):
    cfg = config.load(write_agent(tmp_path, {"cwd": "~"}))
    assert home_warning(cfg, "alice").startswith(f"agent alice writes your home folder ({home}): ")
    assert home_warning(config.load(write_agent(tmp_path, {"cwd": str(tmp_path)})), "alice").startswith(
        f"agent alice writes your home folder ({tmp_path}): "  # a folder above it
    )
    (tmp_path / "elsewhere").mkdir()
    assert home_warning(config.load(write_agent(tmp_path, {"cwd": str(tmp_path / "elsewhere")})), "alice") is None
    assert home_warning(config.load(write_agent(tmp_path, {})), "alice") is None


def test_a_writable_path_in_the_bridge_s_folders_is_refused(tmp_path, home):
    folder = config.user_config_root() / "data" / "other"
    folder.mkdir(parents=True)
    assert agent_problems(tmp_path, {"cwd": str(folder)}) == [
        f"agents.alice.cwd: {folder} lies in {config.user_config_root()}, the bridge's folder of every "
        "config's data (owner passwords, stores): an agent writing there could change the bridge"
    ]


def shipped(tmp_path) -> list[str]:
    found = [str(ROOT / "deploy" / "compose" / "sidekicks.yaml")]
    found += sorted(str(p) for p in (ROOT / "deploy" / "examples").glob("*.yaml"))
    write_default_config(tmp_path / "default.yaml", user="ana")
    return [*found, str(tmp_path / "default.yaml")]


def test_every_shipped_config_is_valid_and_nothing_it_lets_agents_write_holds_the_bridge(tmp_path, home):
    """docs/sandbox.md "Nothing writable holds the bridge": for each shipped config (examples,
    compose, `sidekicks up`'s default), each sandboxed agent: a working directory on purpose
    (`cwd: "~"` the home folder, none its own folder), the bridge's paths and the credential stores
    hidden or read-only, and every folder above them in a writable path a mount point."""
    for path in shipped(tmp_path):
        cfg = config.load(path)
        for name, agent in cfg.agents.items():
            box = sandbox_of(cfg, agent)
            if box is None:
                continue
            spec = spec_of(cfg, name)
            assert spec.cwd in (str(home), str(cfg.data_dir / "agents" / name)), (path, name, spec.cwd)
            paths = sorted({*box.write, *box.read, *box.hide, spec.cwd}, key=len)
            kinds = {p: "dir" if os.path.isdir(p) else "file" for p in paths if os.path.lexists(p)}
            order = mounts(box, spec.cwd, kinds)
            for secret in (home / ".ssh", config.user_config_root()):
                assert _kind_at(order, str(secret)) == HIDE_DIR, (path, name, secret)
            if str(home) in box.write:
                for kept in (home / ".bashrc", home / ".config" / "systemd", home / ".local" / "bin"):
                    assert _kind_at(order, str(kept)) == READ, (path, name, kept)
                    assert _unmovable(order, str(kept)), (path, name, kept)
                assert _unmovable(order, str(config.user_config_root()))


def _kind_at(order, path: str) -> str | None:
    """The kind of the mount that decides what `path` is (the last one it lies in)."""
    return next((m.kind for m in reversed(order) if under(path, m.path)), None)


def _unmovable(order, path: str) -> bool:
    """`path` and every folder above it up to its writable root are mount points."""
    points = {m.path: m.kind for m in order}
    here = Path(path)
    while str(here) not in points or points[str(here)] not in (WRITE,):
        if str(here) not in points or points[str(here)] not in (HIDE_DIR, HIDE_FILE, READ, PIN):
            return False
        here = here.parent
    return True
