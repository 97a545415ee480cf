"""Configuration: validation with one line per problem, exit code 2, registration files."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
import yaml

import config
from config import registration

GOOD = {
    "owner": "@me:localhost",
    "homeserver": {"url": "http://127.0.0.1:8008", "domain": "localhost"},
    "appservice": {"listen": "127.0.0.1:29333", "puppet_prefix": "sk_", "bot": "sidekicks",
                   "registration": "registration.yaml"},
    "agents": {"alice": {"title": "Alice", "command": ["python", "-m", "x"], "env": {"K": 1}}},
    "limits": {"agents_in_memory": 2, "context_messages": 20, "context_chars": 1500},
    "database": "sqlite",
}


def write(tmp_path, data) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(path)


def test_good_config_is_read_with_every_key(tmp_path):
    cfg = config.load(write(tmp_path, GOOD))
    assert cfg.owners == ("@me:localhost",)
    assert cfg.homeserver_url == "http://127.0.0.1:8008" and cfg.domain == "localhost"
    assert (cfg.listen_host, cfg.listen_port) == ("127.0.0.1", 29333)
    assert cfg.puppet_user_id("alice") == "@sk_alice:localhost"
    assert cfg.bot_user_id == "@sidekicks:localhost"
    assert cfg.registration_path == tmp_path / "registration.yaml"
    assert cfg.agents["alice"].command == ("python", "-m", "x")
    assert cfg.agents["alice"].env == {"K": "1"}
    assert (cfg.agents_in_memory, cfg.context_messages, cfg.context_chars) == (2, 20, 1500)
    assert cfg.agent_for_user_id("@sk_alice:localhost") == "alice"
    assert cfg.agent_for_user_id("@sk_bob:localhost") is None


def test_data_dir_is_named_by_the_hash_of_the_absolute_path(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    one = config.load(write(tmp_path, GOOD))
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    two = config.load(write(other_dir, GOOD))
    assert one.data_dir.parent == tmp_path / "xdg" / "sidekicks" / "data"
    assert one.data_dir != two.data_dir
    assert one.data_dir.name == config.config_hash(tmp_path / "config.yaml")
    assert config.default_config_path() == tmp_path / "xdg" / "sidekicks" / "config.yaml"


BAD = [
    ({**GOOD, "agents": {"alice": {"command": []}}}, "agents.alice.command: must be a non-empty list of strings"),
    ({**GOOD, "agents": {"alice": {"command": "  "}}}, "agents.alice.command: must be a non-empty list of strings"),
    ({**GOOD, "owner": "me"}, "owner: must be a Matrix user id"),
    ({k: v for k, v in GOOD.items() if k != "owner"}, "owner: is required"),
    ({**GOOD, "limits": {"agents_in_memory": 0}}, "limits.agents_in_memory: must be a whole number from 1 to 64"),
    ({**GOOD, "limits": {"context_chars": "many"}}, "limits.context_chars: must be a whole number"),
    ({**GOOD, "appservice": {"listen": "nowhere"}}, "appservice.listen: must be HOST:PORT"),
    ({**GOOD, "homeserver": {"url": "ftp://x"}}, "homeserver.url: must be an http(s) URL"),
    ({**GOOD, "database": "mysql://x"}, "database: must be \"sqlite\" or a postgresql://"),
    ({**GOOD, "agents": {"Alice Smith": {"command": ["x"]}}}, "agents.Alice Smith: the name must be"),
    ({**GOOD, "agents": {"alice": {"command": ["x"], "cwd": "/does/not/exist"}}}, "agents.alice.cwd: folder does not exist"),
    ("owner: [unclosed", "not valid YAML"),
    ("- just\n- a list\n", "must be a YAML mapping"),
]


@pytest.mark.parametrize("data,expected", BAD, ids=[e for _, e in BAD])
def test_bad_config_names_file_key_and_problem(tmp_path, data, expected):
    path = write(tmp_path, data)
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    assert any(line.startswith(f"{path}: ") and expected in line for line in caught.value.problems), \
        caught.value.problems


def test_every_problem_is_reported_at_once(tmp_path):
    data = {**GOOD, "owner": 5, "limits": {"agents_in_memory": -1, "context_messages": "x"},
            "agents": {"alice": {"command": [1, 2]}}}
    with pytest.raises(config.ConfigError) as caught:
        config.load(write(tmp_path, data))
    keys = [line.split(": ")[1] for line in caught.value.problems]
    assert keys == ["owner", "agents.alice.command", "limits.agents_in_memory", "limits.context_messages"]


@pytest.mark.parametrize("command", ["run", "check", "registration"])
@pytest.mark.parametrize("data,expected", BAD[:3] + BAD[-2:], ids=lambda v: str(v)[:30])
def test_cli_exits_2_with_one_line_per_problem(tmp_path, command, data, expected):
    path = write(tmp_path, data)
    result = subprocess.run([sys.executable, "-m", "bridge", command, "-c", path],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: ") and expected in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_missing_config_file_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "bridge", "run", "-c", str(tmp_path / "nope.yaml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == f"{tmp_path / 'nope.yaml'}: file not found"


def test_registration_is_0600_with_random_tokens_and_exclusive_namespace(tmp_path):
    cfg = config.load(write(tmp_path, GOOD))
    result = subprocess.run([sys.executable, "-m", "bridge", "registration", "-c", str(cfg.path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    path = tmp_path / "registration.yaml"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    data = yaml.safe_load(path.read_text())
    assert data["namespaces"]["users"] == [{"exclusive": True, "regex": "@sk_.*:localhost"}]
    assert data["rate_limited"] is False and data["receive_ephemeral"] is True
    assert data["sender_localpart"] == "sidekicks" and data["url"] == "http://127.0.0.1:29333"
    assert len(data["as_token"]) >= 40 and data["as_token"] != data["hs_token"]
    # written again: tokens are kept, so the homeserver that loaded them keeps working
    again = registration.ensure(cfg)
    assert (again.as_token, again.hs_token) == (data["as_token"], data["hs_token"])
    other = config.load(write(tmp_path / "x", GOOD) if (tmp_path / "x").mkdir() is None else None)
    fresh = registration.build(other)
    assert fresh.as_token != data["as_token"] and fresh.hs_token != data["hs_token"]


def test_appservice_url_defaults_to_listen_and_can_be_set(tmp_path):
    cfg = config.load(write(tmp_path, {**GOOD, "appservice": {"listen": "0.0.0.0:29333"}}))
    assert cfg.appservice_url == "http://127.0.0.1:29333"
    cfg = config.load(write(tmp_path, {**GOOD, "appservice": {"listen": "0.0.0.0:29333",
                                                               "url": "http://bridge:29333/"}}))
    assert cfg.appservice_url == "http://bridge:29333"
    assert registration.build(cfg).url == "http://bridge:29333"
    with pytest.raises(config.ConfigError) as caught:
        config.load(write(tmp_path, {**GOOD, "appservice": {"url": "bridge"}}))
    assert "appservice.url: must be an http(s) URL" in caught.value.problems[0]
