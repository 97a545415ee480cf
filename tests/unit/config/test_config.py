"""Configuration: validation with one line per problem, exit code 2, registration files."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
import yaml
from config_files import refused

import config
from config import registration

GOOD = {
    "owner": "@me:localhost",
    "homeserver": {"url": "http://127.0.0.1:8008", "domain": "localhost"},
    "appservice": {
        "listen": "127.0.0.1:29333",
        "puppet_prefix": "sk_",
        "bot": "sidekicks",
        "registration": "registration.yaml",
    },
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
    ({**GOOD, "database": "mysql://x"}, 'database: must be "sqlite" or a postgresql://'),
    ({**GOOD, "agents": {"Alice Smith": {"command": ["x"]}}}, "agents.Alice Smith: the name must be"),
    (
        {**GOOD, "agents": {"alice": {"command": ["x"], "cwd": "/does/not/exist"}}},
        "agents.alice.cwd: folder does not exist",
    ),
    (
        {**GOOD, "agents": {"alice": {"command": "run 'x"}}},
        "agents.alice.command: cannot be split into words (no closing quotation)",
    ),
    ("owner: [unclosed", "not valid YAML"),
    ("- just\n- a list\n", "must be a YAML mapping"),
]


@pytest.mark.parametrize("data,expected", BAD, ids=[e for _, e in BAD])
def test_bad_config_names_file_key_and_problem(tmp_path, data, expected):
    path = write(tmp_path, data)
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    assert any(line.startswith(f"{path}: ") and expected in line for line in caught.value.problems), (
        caught.value.problems
    )


# -- typos, non-finite numbers, bytes that are not text --------

TYPOS = [
    (
        {**GOOD, "agents": {"alice": {"command": ["x"], "titel": "Alice"}}},
        "agents.alice.titel: unknown key — did you mean title?",
    ),
    ({**GOOD, "agents": {"alice": {"comand": ["x"]}}}, "agents.alice.comand: unknown key — did you mean command?"),
    (
        {**{k: v for k, v in GOOD.items() if k != "owner"}, "ownr": "@me:localhost"},
        "ownr: unknown key — did you mean owner?",
    ),
    (
        {**GOOD, "limits": {"context_message": 5}},
        "limits.context_message: unknown key — did you mean context_messages?",
    ),
    (
        {**GOOD, "homeserver": {"url": "http://127.0.0.1:8008", "domian": "localhost"}},
        "homeserver.domian: unknown key — did you mean domain?",
    ),
    (
        {**GOOD, "appservice": {"puppet_prefx": "sk_"}},
        "appservice.puppet_prefx: unknown key — did you mean puppet_prefix?",
    ),
    ({**GOOD, "encrypton": "off"}, "encrypton: unknown key — did you mean encryption?"),
    (
        {**GOOD, "zzz": 1},
        "zzz: unknown key (known here: owner, homeserver, appservice, agents, limits, encryption, database, "
        "voice, voice_language, voice_max_seconds, registry)",
    ),
]


@pytest.mark.parametrize("data,expected", TYPOS, ids=[e.split(":")[0] for _, e in TYPOS])
def test_an_unknown_key_is_one_line_naming_the_closest_known_key(tmp_path, data, expected):
    """A misspelt key is never silently ignored (the agent losing its title without a word), and a
    misspelt required key is named as the typo, not reported again as missing."""
    path = write(tmp_path, data)
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    assert caught.value.problems == [f"{path}: {expected}"]


def test_a_typo_exits_2_from_the_command_line_in_one_line(tmp_path):
    path = write(tmp_path, "owner: '@me:localhost'\nagents:\n  alice:\n    titel: Alice\n    comand: [x]\n")
    assert refused("check", path) == [
        f"{path}: agents.alice.titel: unknown key — did you mean title?",
        f"{path}: agents.alice.comand: unknown key — did you mean command?",
    ]


def test_every_shipped_config_uses_known_keys_only(tmp_path):
    from bridge.local.up import write_default_config

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    shipped = [os.path.join(root, "deploy", "compose", "sidekicks.yaml")]
    shipped += [
        os.path.join(root, "deploy", "examples", n) for n in os.listdir(os.path.join(root, "deploy", "examples"))
    ]
    write_default_config(tmp_path / "default.yaml", user="ana")
    for path in shipped + [str(tmp_path / "default.yaml")]:
        config.load(path)  # raises on any unknown key


@pytest.mark.parametrize(
    "command,parts",
    [
        ("opencode acp", ("opencode", "acp")),
        ("python -m x --name 'Big model'", ("python", "-m", "x", "--name", "Big model")),
        (["ssh", "box", "cd ~/src && exec agent"], ("ssh", "box", "cd ~/src && exec agent")),
    ],
)
def test_command_is_a_list_or_one_command_line_split_as_a_shell_would(tmp_path, command, parts):
    cfg = config.load(write(tmp_path, {**GOOD, "agents": {"alice": {"command": command}}}))
    assert cfg.agents["alice"].command == parts


NON_FINITE = [
    (
        "agents:\n  alice:\n    command: [x]\n    timeout: .nan\n",
        "agents.alice.timeout: must be a finite number of at least 1, got .nan",
    ),
    (
        "appservice:\n  permission_timeout: .inf\n",
        "appservice.permission_timeout: must be a finite number of at least 1, got .inf",
    ),
    ("limits:\n  attachment_mib: .nan\n", "limits.attachment_mib: must be a finite number of at least 0.01, got .nan"),
    ("limits:\n  context_chars: -.inf\n", "limits.context_chars: must be a whole number from 1 to 1000000, got -.inf"),
]


@pytest.mark.parametrize("text,expected", NON_FINITE, ids=[e.split(":")[0] for _, e in NON_FINITE])
def test_a_non_finite_number_is_one_line_and_exit_2(tmp_path, text, expected):
    path = write(tmp_path, "owner: '@me:localhost'\n" + text)
    assert refused("check", path) == [f"{path}: {expected}"]


def test_a_file_that_is_not_utf8_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_bytes(b"owner: '@me:localhost'\nagents:\n  alice:\n    title: Ren\xe9\n    command: [x]\n")
    assert refused("run", path) == [f"{path}: line 4: not UTF-8 text (byte 0xe9): save the file as UTF-8"]


def test_every_problem_is_reported_at_once(tmp_path):
    data = {
        **GOOD,
        "owner": 5,
        "limits": {"agents_in_memory": -1, "context_messages": "x"},
        "agents": {"alice": {"command": [1, 2]}},
    }
    with pytest.raises(config.ConfigError) as caught:
        config.load(write(tmp_path, data))
    keys = [line.split(": ")[1] for line in caught.value.problems]
    assert keys == ["owner", "agents.alice.command", "limits.agents_in_memory", "limits.context_messages"]


@pytest.mark.parametrize("command", ["run", "check", "registration"])
@pytest.mark.parametrize("data,expected", BAD[:3] + BAD[-2:], ids=lambda v: str(v)[:30])
def test_cli_exits_2_with_one_line_per_problem(tmp_path, command, data, expected):
    path = write(tmp_path, data)
    lines = refused(command, path)
    assert len(lines) == 1 and lines[0].startswith(f"{path}: ") and expected in lines[0], lines
    assert not any("Traceback" in line for line in lines)


def test_missing_config_file_is_one_line(tmp_path):
    assert refused("run", tmp_path / "nope.yaml") == [f"{tmp_path / 'nope.yaml'}: file not found"]


def test_registration_is_0600_with_random_tokens_and_exclusive_namespace(tmp_path):
    cfg = config.load(write(tmp_path, GOOD))
    result = subprocess.run(
        [sys.executable, "-m", "bridge", "registration", "-c", str(cfg.path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    path = tmp_path / "registration.yaml"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    data = yaml.safe_load(path.read_text())
    assert data["namespaces"]["users"] == [{"exclusive": True, "regex": "@sk_.*:localhost"}]
    # `!new`'s alias: any on the server, shared (docs/commands.md "In the bridge bot's DM")
    assert data["namespaces"]["aliases"] == [{"exclusive": False, "regex": "#.*:localhost"}]
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
    cfg = config.load(
        write(tmp_path, {**GOOD, "appservice": {"listen": "0.0.0.0:29333", "url": "http://bridge:29333/"}})
    )
    assert cfg.appservice_url == "http://bridge:29333"
    assert registration.build(cfg).url == "http://bridge:29333"
    with pytest.raises(config.ConfigError) as caught:
        config.load(write(tmp_path, {**GOOD, "appservice": {"url": "bridge"}}))
    assert "appservice.url: must be an http(s) URL" in caught.value.problems[0]


# -- several people on one homeserver (docs/architecture.md "Beyond one machine") ------------------


def person(tmp_path, name, prefix, bot, as_id, **homeserver):
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    data = {
        **GOOD,
        "owner": f"@{name}:localhost",
        "homeserver": {"url": "http://127.0.0.1:8008", "domain": "localhost", **homeserver},
        "appservice": {**GOOD["appservice"], "puppet_prefix": prefix, "bot": bot, "id": as_id},
    }
    return config.load(write(folder, data))


def test_literal_prefix_of_namespace_regexes():
    assert registration.literal_prefix("@sk_.*:localhost") == ("@sk_", False)
    assert registration.literal_prefix(r"@sk\-ben_.*:localhost") == ("@sk-ben_", False)
    assert registration.literal_prefix(r"@telegram_\d+:x") == ("@telegram_", False)
    assert registration.literal_prefix("@ab?c") == ("@a", False)
    assert registration.literal_prefix("@bot:localhost") == ("@bot:localhost", True)


def test_distinct_registrations_do_not_clash_and_overlapping_ones_do(tmp_path):
    ana = person(tmp_path, "ana", "sk_", "sidekicks", "sidekicks")
    ana_file = tmp_path / "ana" / "registration.yaml"
    registration.ensure(ana, others=[])
    ben = person(tmp_path, "ben", "sk-ben_", "sidekicks_ben", "sidekicks_ben")
    registration.ensure(ben, others=[ana_file])  # no clash: written
    assert registration.read(ben.registration_path).puppet_regex == r"@sk\-ben_.*:localhost"

    cy = person(tmp_path, "cy", "sk_cy_", "sidekicks_cy", "sidekicks_cy")
    with pytest.raises(config.ConfigError) as caught:
        registration.ensure(cy, others=[ana_file, ben.registration_path])
    [line] = caught.value.problems
    assert "appservice.puppet_prefix: 'sk_cy_' claims users that" in line and str(ana_file) in line
    assert "'sk-cy_'" in line  # what to use instead
    assert not cy.registration_path.exists()  # refused before anything was written

    same = person(tmp_path, "dee", "dee_", "sidekicks", "sidekicks")
    with pytest.raises(config.ConfigError) as caught:
        registration.ensure(same, others=[ana_file])
    text = "\n".join(caught.value.problems)
    assert "appservice.id: 'sidekicks' is already used by" in text
    assert "appservice.bot: @sidekicks:localhost is already claimed by" in text

    wide = person(tmp_path, "eve", "s", "eve_bot", "eve")  # `@s.*` would swallow @sidekicks
    with pytest.raises(config.ConfigError) as caught:
        registration.ensure(wide, others=[ben.registration_path])
    assert any("would claim the bot @sidekicks_ben:localhost" in p for p in caught.value.problems)


def ana_listed_and_cy_after(tmp_path):
    """Ana's registration listed in a homeserver.yaml, and Cy's config (a wider puppet prefix,
    clashing) naming that file: (the file, Cy's config)."""
    ana = person(tmp_path, "ana", "sk_", "sidekicks", "sidekicks")
    registration.ensure(ana, others=[])
    hs_yaml = tmp_path / "homeserver.yaml"
    hs_yaml.write_text(
        yaml.safe_dump({"server_name": "localhost", "app_service_config_files": [str(ana.registration_path)]})
    )
    return hs_yaml, person(tmp_path, "cy", "sk_cy_", "sidekicks_cy", "sidekicks_cy", config=str(hs_yaml))


def test_registration_command_refuses_a_clash_listed_in_homeserver_config(tmp_path):
    hs_yaml, cy = ana_listed_and_cy_after(tmp_path)
    assert cy.homeserver_config == hs_yaml
    [line] = refused("registration", cy.path)
    assert "appservice.puppet_prefix: 'sk_cy_' claims users that" in line
    # its own registration listed there is no clash: writing it again is fine
    ana_again = person(tmp_path, "ana", "sk_", "sidekicks", "sidekicks", config=str(hs_yaml))
    registration.ensure(ana_again)


def test_run_refuses_to_start_on_a_clash(tmp_path):
    _, cy = ana_listed_and_cy_after(tmp_path)
    registration.ensure(cy, others=[])  # written before the other bridge appeared
    [line] = refused("run", cy.path)
    assert "appservice.puppet_prefix: 'sk_cy_' claims users that" in line


def test_default_config_for_a_second_person_gets_names_of_its_own(tmp_path):
    from bridge.local.up import write_default_config

    first, second = tmp_path / "ana" / "config.yaml", tmp_path / "ben" / "config.yaml"
    write_default_config(first, user="ana")
    write_default_config(second, shared=True, user="ben")
    one, two = config.load(first), config.load(second)
    assert (one.puppet_prefix, one.bot, one.appservice_id, one.listen_port) == ("sk_", "sidekicks", "sidekicks", 29333)
    assert (two.puppet_prefix, two.bot, two.appservice_id) == ("sk-ben_", "sidekicks_ben", "sidekicks_ben")
    assert two.listen_port != 29333 and two.owners == ("@ben:localhost",)
    assert one.registration_path != two.registration_path
    registration.ensure(one, others=[])
    registration.ensure(two, others=[one.registration_path])  # no clash


def test_tools_are_on_by_default_and_off_on_request_with_their_limits(tmp_path):
    cfg = config.load(write(tmp_path, GOOD))
    assert cfg.agents["alice"].tools is True
    assert (cfg.tool_calls_per_turn, cfg.history_messages, cfg.schedules_per_conversation) == (30, 100, 20)
    data = {
        **GOOD,
        "agents": {"alice": {**GOOD["agents"]["alice"], "tools": "off"}, "bob": {"command": "b", "tools": True}},
        "limits": {**GOOD["limits"], "tool_calls_per_turn": 5, "history_messages": 10, "schedules_per_conversation": 0},
    }
    cfg = config.load(write(tmp_path, data))
    assert cfg.agents["alice"].tools is False and cfg.agents["bob"].tools is True
    assert (cfg.tool_calls_per_turn, cfg.history_messages, cfg.schedules_per_conversation) == (5, 10, 0)


def test_a_bad_tools_value_is_one_line(tmp_path):
    data = {**GOOD, "agents": {"alice": {**GOOD["agents"]["alice"], "tools": "maybe"}}}
    with pytest.raises(config.ConfigError) as caught:
        config.load(write(tmp_path, data))
    assert caught.value.problems == [f"{write(tmp_path, data)}: agents.alice.tools: must be on or off, got 'maybe'"]
    data = {**GOOD, "agents": {"alice": {**GOOD["agents"]["alice"], "tool": "on"}}}
    with pytest.raises(config.ConfigError, match="agents.alice.tool: unknown key — did you mean tools"):
        config.load(write(tmp_path, data))


def test_an_avatar_is_a_url_or_a_picture_file_next_to_the_config(tmp_path):
    """docs/configuration.md "agents": `avatar:`, a URL kept as it is, a file made absolute."""
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "bob.png").write_bytes(b"\x89PNG")
    alice = {**GOOD["agents"]["alice"], "avatar": "https://example.org/alice.png"}
    data = {
        **GOOD,
        "agents": {"alice": alice, "bob": {"command": "b", "avatar": "pics/bob.png"}, "carol": {"command": "c"}},
    }
    agents = config.load(write(tmp_path, data)).agents
    assert agents["alice"].avatar == "https://example.org/alice.png"
    assert agents["bob"].avatar == str(tmp_path / "pics" / "bob.png")
    assert agents["carol"].avatar is None
    for value, problem in (("pics/none.png", "agents.bob.avatar: no such file: "), (7, "agents.bob.avatar: must be")):
        data = {**GOOD, "agents": {"bob": {"command": "b", "avatar": value}}}
        with pytest.raises(config.ConfigError) as caught:
            config.load(write(tmp_path, data))
        assert any(problem in line for line in caught.value.problems), caught.value.problems
