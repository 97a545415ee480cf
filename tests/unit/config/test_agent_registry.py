"""The ACP agent registry, read (docs/configuration.md "Agents from the registry"): entries,
search, the distribution chosen, the pinned command, the settings written. Pure."""

from __future__ import annotations

import pytest

from config import agent_registry as reg
from config.agent_registry import RegistryError

REGISTRY = {
    "version": "1.0.0",
    "agents": [
        {
            "id": "claude-code-acp",
            "name": "Claude Code",
            "version": "0.16.0",
            "description": "ACP wrapper for Anthropic's Claude",
            "distribution": {"npx": {"package": "@zed-industries/claude-code-acp@0.16.0"}},
        },
        {
            "id": "fast-agent",
            "name": "fast-agent",
            "version": "0.4.2",
            "description": "Python agents",
            "distribution": {"uvx": {"package": "fast-agent-acp", "args": ["-x"]}},
        },
        {
            "id": "opencode",
            "name": "OpenCode",
            "version": "1.1.53",
            "description": "The open source coding agent",
            "distribution": {
                "binary": {
                    "linux-x86_64": {"archive": "https://x/opencode.tar.gz", "cmd": "./opencode", "args": ["acp"]},
                    "darwin-aarch64": {"archive": "https://x/opencode.zip", "cmd": "./opencode", "args": ["acp"]},
                }
            },
        },
        {"id": "Bad Id", "name": "x", "version": "1.0.0", "description": "x", "distribution": {"npx": {}}},
        {"id": "nodist", "name": "x", "version": "1.0.0", "description": "x", "distribution": {"docker": {}}},
        "not an entry",
    ],
}


def entries():
    return reg.parse_registry(REGISTRY)


def test_entries_that_break_the_format_are_left_out():
    assert [e.id for e in entries()] == ["claude-code-acp", "fast-agent", "opencode"]


@pytest.mark.parametrize("data", [[], {"agents": "x"}, None, {"version": "1"}])
def test_a_file_that_is_no_registry_is_refused(data):
    with pytest.raises(RegistryError, match="not an ACP agent registry"):
        reg.parse_registry(data)


def test_search_matches_every_word_in_id_name_or_description():
    assert [e.id for e in reg.search(entries(), "coding OPEN")] == ["opencode"]
    assert [e.id for e in reg.search(entries(), "")] == ["claude-code-acp", "fast-agent", "opencode"]
    assert reg.search(entries(), "nothing-like-it") == []


def test_find_names_the_close_ids_of_an_unknown_one():
    assert reg.find(entries(), "opencode").name == "OpenCode"
    with pytest.raises(RegistryError, match="did you mean claude-code-acp"):
        reg.find(entries(), "claude")


def test_search_lines_say_what_each_runs_with_here():
    lines = reg.search_lines(entries(), "linux-aarch64")
    assert lines[0] == "claude-code-acp: Claude Code 0.16.0 (npx)"
    assert lines[1] == "    ACP wrapper for Anthropic's Claude"
    assert lines[4] == "opencode: OpenCode 1.1.53 (nothing for this machine)"


@pytest.mark.parametrize(
    ("system", "machine", "key"),
    [("Linux", "x86_64", "linux-x86_64"), ("Darwin", "arm64", "darwin-aarch64"), ("Linux", "riscv64", None)],
)
def test_platform_key(system, machine, key):
    assert reg.platform_key(system, machine) == key


def test_a_package_is_preferred_where_its_tool_is_installed_else_the_binary():
    claude, fast, opencode = entries()
    assert reg.choose(claude, "linux-x86_64", {"npx"})[0] == "npx"
    assert reg.choose(fast, "linux-x86_64", {"uvx"})[0] == "uvx"
    assert reg.choose(opencode, "linux-x86_64", {"npx"}) == (
        "binary",
        REGISTRY["agents"][2]["distribution"]["binary"]["linux-x86_64"],
    )
    with pytest.raises(RegistryError, match="claude-code-acp needs npx"):
        reg.choose(claude, "linux-x86_64", set())
    with pytest.raises(RegistryError, match="a binary for windows-x86_64"):
        reg.choose(opencode, "windows-x86_64", {"npx", "uvx"})


def test_the_command_is_pinned_to_the_registry_version():
    assert reg.package_command("npx", {"package": "@scope/agent", "args": ["--acp"]}, "1.2.3") == [
        "npx",
        "-y",
        "@scope/agent@1.2.3",
        "--acp",
    ]
    assert reg.package_command("npx", {"package": "@scope/agent@0.9.0"}, "1.2.3")[2] == "@scope/agent@0.9.0"
    assert reg.package_command("uvx", {"package": "fast-agent-acp", "args": ["-x"]}, "0.4.2") == [
        "uvx",
        "fast-agent-acp==0.4.2",
        "-x",
    ]
    assert reg.pinned_pypi("tool>=1", "2.0.0") == "tool>=1"


def test_a_binary_command_stays_inside_its_folder():
    target = {"archive": "https://x/a.tar.gz", "cmd": "./bin/agent", "args": ["acp"]}
    assert reg.binary_command(target, "/cache/a-1.0.0") == ["/cache/a-1.0.0/bin/agent", "acp"]
    for cmd in ("../../bin/sh", "/bin/sh", "bin/../../x"):
        with pytest.raises(RegistryError, match="not inside its archive"):
            reg.binary_command({**target, "cmd": cmd}, "/cache/a")


def test_the_settings_written_for_a_known_agent():
    claude = entries()[0]
    command = ["npx", "-y", "@zed-industries/claude-code-acp@0.16.0"]
    settings = reg.agent_settings(claude, "npx", command, {"A": 1}, "~")
    assert settings == {
        "title": "Claude Code",
        "command": command,
        "cwd": "~",
        "env": {"A": "1"},
        "sandbox": {"write": ["~/.npm", "~/.claude", "~/.claude.json"]},
    }
    assert reg.config_name(claude) == "claude"


def test_qwen_code_gets_its_state_folder():
    # docs/configuration.md "Agents from the registry": Qwen Code exits at start without ~/.qwen
    qwen = reg.Entry("qwen-code", "Qwen Code", "0.8.2", "x", {"npx": {"package": "@qwen-code/qwen-code@0.8.2"}})
    command = reg.package_command("npx", qwen.distribution["npx"], qwen.version)
    settings = reg.agent_settings(qwen, "npx", command, None, "/work")
    assert settings["sandbox"] == {"write": ["~/.npm", "~/.qwen"]}
    assert reg.config_name(qwen) == "qwen-code"


def test_an_unknown_binary_agent_gets_no_write_folders():
    unknown = reg.Entry("tiny", "Tiny", "1.0.0", "x", {"binary": {}})
    settings = reg.agent_settings(unknown, "binary", ["/c/tiny"], None, "/work")
    assert settings == {"title": "Tiny", "command": ["/c/tiny"], "cwd": "/work"}
    assert reg.config_name(unknown) == "tiny"


@pytest.mark.parametrize(
    ("seconds", "text"), [(5, "just now"), (61, "1 minute ago"), (7300, "2 hours ago"), (90000, "1 day ago")]
)
def test_age_text(seconds, text):
    assert reg.age_text(seconds) == text


def test_an_entrys_icon_becomes_its_avatar():
    """docs/configuration.md "Agents from the registry": an http(s) `icon` is written as `avatar:`."""
    base = {
        "id": "pic",
        "name": "Pic",
        "version": "1.0.0",
        "description": "x",
        "distribution": {"npx": {"package": "p"}},
    }
    data = {"agents": [{**base, "icon": "https://x/pic.svg"}, {**base, "id": "odd", "icon": "file:///etc/passwd"}]}
    data["agents"].append({**base, "id": "none"})
    pic, odd, none = reg.parse_registry(data)
    assert (pic.icon, odd.icon, none.icon) == ("https://x/pic.svg", "", "")
    settings = reg.agent_settings(pic, "npx", ["npx"], None, "~")
    assert list(settings) == ["title", "avatar", "command", "cwd", "sandbox"]
    assert settings["avatar"] == "https://x/pic.svg"
    assert "avatar" not in reg.agent_settings(odd, "npx", ["npx"], None, "~")
    assert "avatar" not in reg.agent_settings(none, "npx", ["npx"], None, "~")
