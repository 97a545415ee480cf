"""`sidekicks check` (docs/commands.md "The command line") run as a real subprocess, and the example
configs in deploy/examples.

`check` validates the configuration, starts each agent, runs ACP `initialize` and `session/new`
and reports what the agent announces: a ✓/✗ line per agent, then indented details. It never
contacts the homeserver, so the configs here point at an unused port. The report itself is a pure
function (`bridge.local.check.report`), tested at the end without processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import config
from bridge.local.check import Announced, report

ROOT = Path(__file__).resolve().parents[3]
SCRIPTED = str(ROOT / "tests" / "agents" / "scripted_agent.py")
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))


def write_config(folder: Path, agents: dict) -> Path:
    path = folder / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "owner": "@me:localhost",
                "homeserver": {"url": "http://127.0.0.1:1", "domain": "localhost"},
                "agents": agents,
            },
            sort_keys=False,
        ),
        encoding="utf-8",
    )
    return path


def scripted(*options: str, **entry) -> dict:
    """An agent entry running the scripted agent with `options` (`entry`: more of its keys)."""
    return {"command": [sys.executable, SCRIPTED, *options], **entry}


def check(path: Path, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bridge", "check", "-c", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def checked(path: Path, returncode: int, env: dict | None = None) -> subprocess.CompletedProcess:
    """`check` of `path`: it ended with `returncode` and no traceback."""
    result = check(path, env=env)
    no_traceback(result)
    assert result.returncode == returncode, result.stdout + result.stderr
    return result


def agent_lines(output: str, name: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(("✓ ", "✗ ")) and f" {name}:" in line]


def details(output: str, name: str) -> list[str]:
    """The indented lines under `name`'s ✓/✗ line, stripped; but its `sandbox:` line (see
    sandbox_of below)."""
    lines = output.splitlines()
    [start] = [i for i, line in enumerate(lines) if line.startswith(("✓ ", "✗ ")) and f" {name}:" in line]
    found = []
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        if not line.startswith("    sandbox: "):
            found.append(line.strip())
    return found


def sandbox_of(output: str, name: str) -> str:
    """What check says of `name`'s sandbox (the line after its ✓/✗ line)."""
    lines = output.splitlines()
    [start] = [i for i, line in enumerate(lines) if line.startswith(("✓ ", "✗ ")) and f" {name}:" in line]
    assert lines[start + 1].startswith("    sandbox: "), output
    return lines[start + 1].removeprefix("    sandbox: ")


def no_traceback(result: subprocess.CompletedProcess) -> None:
    for stream in (result.stdout, result.stderr):
        assert "Traceback" not in stream, stream


def test_good_agent_is_reported_with_its_announcements(tmp_path):
    path = write_config(
        tmp_path,
        {
            "scripted": scripted(
                "--name",
                "scripted",
                "--version",
                "1.2",
                "--load-session",
                "--commands",
                "review:Review code,plan:Make a plan",
            )
        },
    )
    result = checked(path, 0)
    assert "configuration is valid (1 agent)" in result.stdout
    lines = agent_lines(result.stdout, "scripted")
    assert len(lines) == 1, result.stdout
    line = lines[0]
    assert line.startswith("✓ scripted:")
    assert "scripted 1.2" in line
    assert "loadSession: yes" in line
    assert line.endswith("commands: /review, /plan"), line


def test_agent_without_load_session_or_commands_says_so(tmp_path):
    path = write_config(tmp_path, {"plain": scripted("--name", "plainagent")})
    result = checked(path, 0)
    [line] = agent_lines(result.stdout, "plain")
    assert "plainagent 1.0" in line
    assert "loadSession: no" in line
    assert line.endswith("commands: none"), line


CONFIG_OPTIONS = [
    {
        "id": "model",
        "name": "Model",
        "category": "model",
        "type": "select",
        "currentValue": "big",
        "options": [{"value": "small", "name": "Small model"}, {"value": "big", "name": "Big model"}],
    },
    {
        "id": "effort",
        "name": "Effort",
        "category": "thought_level",
        "type": "select",
        "currentValue": "low",
        "options": [
            {"group": "cheap", "name": "Cheap", "options": [{"value": "low", "name": "Low"}]},
            {"group": "dear", "name": "Dear", "options": [{"value": "high", "name": "High"}]},
        ],
    },
    {"id": "yolo", "name": "Auto-approve", "type": "boolean", "currentValue": False},
]


def test_modes_config_options_models_and_capabilities_are_listed(tmp_path):
    path = write_config(
        tmp_path,
        {
            "coder": scripted(
                "--name",
                "coder",
                "--version",
                "2.0",
                "--commands",
                "init:Set up",
                "--prompt-caps",
                "image,embeddedContext",
                "--modes",
                "ask:Ask first,code:Write code",
                "--config-options",
                json.dumps(CONFIG_OPTIONS),
                "--models",
                "m1:Model one,m2",
            )
        },
    )
    result = checked(path, 0)
    [line] = agent_lines(result.stdout, "coder")
    assert line == "✓ coder: coder 2.0; loadSession: no; commands: /init", line
    assert details(result.stdout, "coder") == [
        "protocol: ACP v1; prompts: text, image, embedded context",
        "capabilities: promptCapabilities.image, promptCapabilities.embeddedContext",
        "auth methods: none",
        "tools: MCP server `matrix` over stdio — history, send_file, react, schedule, schedules, "
        "cancel_schedule, handoff",
        'modes: ask "Ask first" (current), code "Write code"',
        "config options:",
        'model "Model" [model]: small "Small model", big "Big model" (current)',
        'effort "Effort" [thought_level]: low "Low" (current), high "High"',
        'yolo "Auto-approve": boolean option, current: False',
        'models: m1 "Model one" (current), m2',
    ], result.stdout


def test_agent_without_modes_or_options_says_none(tmp_path):
    path = write_config(tmp_path, {"plain": scripted()})
    result = checked(path, 0)
    assert details(result.stdout, "plain") == [
        "protocol: ACP v1; prompts: text",
        "capabilities: none",
        "auth methods: none",
        "tools: MCP server `matrix` over stdio — history, send_file, react, schedule, schedules, "
        "cancel_schedule, handoff",
        "modes: none",
        "config options: none",
        "models: none",
    ], result.stdout


def test_an_agent_without_tools_says_so(tmp_path):
    path = write_config(tmp_path, {"plain": scripted(tools="off")})
    result = checked(path, 0)
    assert "tools: none (agents.plain.tools: off)" in details(result.stdout, "plain"), result.stdout


def test_session_new_refused_still_reports_what_initialize_said(tmp_path):
    # an agent that wants a login (gemini --acp without a Google account does this)
    path = write_config(
        tmp_path,
        {
            "gem": scripted(
                "--auth",
                "--name",
                "gemini-cli",
                "--version",
                "0.61.0",
                "--load-session",
                "--prompt-caps",
                "image,audio,embeddedContext",
                "--modes",
                "ask:Ask",
            )
        },
    )
    result = checked(path, 1)
    [line] = agent_lines(result.stdout, "gem")
    assert line.startswith("✗ gem: gem requires authentication (Scripted login)"), line
    assert details(result.stdout, "gem") == [
        "agent: gemini-cli 0.61.0; loadSession: yes",
        "protocol: ACP v1; prompts: text, image, audio, embedded context",
        "capabilities: loadSession, promptCapabilities.image, promptCapabilities.audio, "
        "promptCapabilities.embeddedContext",
        "auth methods: scripted-login (Scripted login)",
        "tools: MCP server `matrix` over stdio — history, send_file, react, schedule, schedules, "
        "cancel_schedule, handoff",
    ], result.stdout  # no modes: session/new never answered with any


def test_an_agent_error_shows_its_data_and_the_end_of_its_stderr(tmp_path):
    # Claude Code's ACP adapter as root: "Internal error" alone, the cause in the error's data
    # and on its stderr; check dropped both
    path = write_config(
        tmp_path,
        {"claude": scripted("--name", "claude-code-acp", "--fail-session", "Query closed before response received")},
    )
    result = checked(path, 1)
    [line] = agent_lines(result.stdout, "claude")
    assert line == "✗ claude: Internal error (JSON-RPC error -32603)", line
    assert details(result.stdout, "claude")[:4] == [
        "error data: Query closed before response received",
        "stderr (last 2 lines):",
        "scripted_agent: starting a session",
        "scripted_agent: --fail-session: cannot run here (on purpose)",
    ], result.stdout
    assert "agent: claude-code-acp 1.0; loadSession: no" in details(result.stdout, "claude")


def test_report_shows_structured_error_data_and_only_the_stderr_tail():
    found = Announced(
        error="Internal error (JSON-RPC error -32603)",
        error_data={"details": "x" * 400},
        stderr="".join(f"line {i}\n" for i in range(31)) + "\x1b[31mred\x1b[0m\x07\n\n",
    )
    lines = report("a", found)
    assert lines[1].startswith('    error data: {"details": "xxx') and lines[1].endswith("…")
    assert len(lines[1]) == len("    error data: ") + 300
    assert lines[2] == "    stderr (last 12 lines):"
    assert lines[3] == "      line 20" and lines[-2] == "      line 30" and len(lines) == 15
    assert lines[-1] == "      red"  # the agent's terminal colours are not passed to ours


def test_agent_crashing_at_start_gives_one_clear_line(tmp_path):
    path = write_config(tmp_path, {"broken": scripted("--crash-at-start")})
    result = checked(path, 1)
    lines = agent_lines(result.stdout, "broken")
    assert len(lines) == 1, result.stdout
    line = lines[0]
    assert line.startswith("✗ broken:")
    assert "exit code 3" in line
    assert "crashing at start on purpose" in line  # the agent's stderr
    assert "\n" not in line
    # initialize never answered: nothing announced to tell, only the end of its stderr
    assert details(result.stdout, "broken") == [
        "stderr (last 1 line):",
        "scripted_agent: crashing at start on purpose",
    ], result.stdout


def test_missing_executable_says_command_not_found(tmp_path):
    path = write_config(
        tmp_path,
        {
            "ghost": {"command": ["sidekicks-no-such-agent-5f3a", "acp"]},
            "good": scripted(),
        },
    )
    result = checked(path, 1)
    [line] = agent_lines(result.stdout, "ghost")
    assert line.startswith("✗ ghost:")
    assert "command not found" in line
    assert "sidekicks-no-such-agent-5f3a" in line
    # the other agent is still checked and reported fine
    [good] = agent_lines(result.stdout, "good")
    assert good.startswith("✓ good:")


def test_check_says_each_agent_s_sandbox(tmp_path):
    """docs/sandbox.md: on (what it writes, the network), off, or remote over ssh."""
    (tmp_path / "work").mkdir()
    path = write_config(
        tmp_path,
        {
            "boxed": scripted(cwd="work", sandbox={"write": ["state"], "network": "off"}),
            "open": scripted(sandbox="off"),
            "far": {
                "command": [
                    "ssh",
                    "-o",
                    "BatchMode=yes",
                    "-o",
                    "ConnectTimeout=1",
                    "sidekicks-nowhere.invalid",
                    "agent",
                ]
            },
        },
    )
    result = check(path)
    no_traceback(result)
    assert sandbox_of(result.stdout, "boxed") == f"on; writes {tmp_path / 'work'}, {tmp_path / 'state'}; network off"
    assert agent_lines(result.stdout, "boxed")[0].startswith("✓ boxed:")  # it starts, sandboxed
    assert sandbox_of(result.stdout, "open") == "off (agents.open.sandbox: off): it reaches what the bridge reaches"
    assert sandbox_of(result.stdout, "far") == (
        "remote over ssh to sidekicks-nowhere.invalid (not sandboxed by the bridge; files it names are not read here)"
    )


def test_without_bubblewrap_the_agent_does_not_start_and_check_says_the_fix(tmp_path):
    """No bwrap on PATH (the agent's command given by its full path): ✗ with the fix, never an
    agent started unsandboxed; `sandbox: off` still starts."""
    path = write_config(
        tmp_path,
        {
            "boxed": scripted(),
            "open": scripted(sandbox="off"),
        },
    )
    empty = tmp_path / "bin"
    empty.mkdir()
    result = checked(path, 1, env={"PATH": str(empty)})
    [line] = agent_lines(result.stdout, "boxed")
    assert line == (
        "✗ boxed: sandbox cannot run: bubblewrap is not installed: no bwrap on PATH; "
        "install bubblewrap (apt-get install bubblewrap) or set sandbox: off for this agent"
    ), line
    [open_line] = agent_lines(result.stdout, "open")
    assert open_line.startswith("✓ open:"), result.stdout


def test_invalid_config_is_refused_with_exit_code_2(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text('owner: "@me:localhost"\nagents:\n  alice:\n    command: []\n', encoding="utf-8")
    result = check(path)
    no_traceback(result)
    assert result.returncode == 2
    assert "agents.alice.command: must be a non-empty list of strings" in result.stderr
    assert not agent_lines(result.stdout, "alice")


@pytest.mark.model
def test_local_model_agent(tmp_path):
    path = write_config(
        tmp_path,
        {
            "local": {
                "command": [sys.executable, "-m", "acp.agents.local_model", "--sessions", str(tmp_path / "sessions")],
                "sandbox": {"write": [str(tmp_path / "sessions")], "network": "off"},
            }
        },
    )
    result = checked(path, 0)
    [line] = agent_lines(result.stdout, "local")
    assert line.startswith("✓ local: sidekicks-local ")
    assert "loadSession: yes" in line
    commands = line.split("commands: ", 1)[1].split(", ")
    assert "/clear" in commands, line


def test_example_configs_are_valid():
    assert len(EXAMPLES) >= 9, [p.name for p in EXAMPLES]
    for path in EXAMPLES:
        cfg = config.load(path)
        assert cfg.agents, f"{path.name}: no agents"
        assert cfg.owners, f"{path.name}: no owner"
    compose = config.load(ROOT / "deploy" / "compose" / "sidekicks.yaml")
    assert compose.appservice_url == "http://bridge:29333"  # reachable from the Synapse container
    assert compose.database.startswith("postgresql://")


def test_example_configs_cover_the_documented_agents():
    commands = {}
    for path in EXAMPLES:
        for name, agent in config.load(path).agents.items():
            commands[f"{path.name}:{name}"] = " ".join(agent.command)
    joined = "\n".join(commands.values())
    for needle in (
        "acp.agents.local_model",
        "@zed-industries/claude-code-acp",
        "@zed-industries/codex-acp",
        "gemini --experimental-acp",
        "goose acp",
        "opencode acp",
        "fast-agent",
        "ssh ",
    ):
        assert needle in joined, f"no example runs {needle!r}"
    databases = {config.load(path).database for path in EXAMPLES}
    assert any(db.startswith("postgres") for db in databases), databases


# ---- the report as a pure function ------------------------------------------------------------


def test_report_shortens_long_lists_and_flattens_odd_values():
    found = Announced(
        info={"name": "odd\nagent", "version": "1"},
        protocol=1,
        initialized=True,
        auth_methods=[{"id": "a"}, {"id": "b", "name": "b"}],
        session={
            "sessionId": "s",
            "modes": {"availableModes": ["junk", {"id": "x"}]},
            "configOptions": [
                {
                    "id": "model",
                    "type": "select",
                    "currentValue": "m3",
                    "options": [{"value": f"m{i}"} for i in range(20)] + [7],
                }
            ],
            "models": "not an object",
        },
        commands=[{"name": "go"}, "junk"],
    )
    lines = report("odd", found)
    assert lines[0] == "✓ odd: odd agent 1; loadSession: no; commands: /go"
    assert "    auth methods: a, b" in lines
    assert "    modes: x" in lines
    [model] = [line for line in lines if line.startswith("      model")]
    assert model.startswith("      model: m0, m1, m2, m3 (current), m4,")
    assert model.endswith("m11, … 8 more"), model
    assert lines[-1] == "    models: none"


def test_report_of_an_agent_that_never_initialized_is_one_line():
    assert report("ghost", Announced(error="command not found: ghost")) == ["✗ ghost: command not found: ghost"]


def test_every_announced_capability_is_named_session_ones_included():
    from bridge.local.check import announced_capabilities

    caps = {
        "loadSession": True,
        "promptCapabilities": {"image": True, "audio": False},
        "mcpCapabilities": {"http": False, "sse": False},
        "sessionCapabilities": {"list": {}, "resume": {}, "delete": {}, "close": None, "_meta": {"x": 1}},
        "futureThing": {},
        "_meta": {"y": True},
    }
    assert announced_capabilities(caps) == [
        "loadSession",
        "promptCapabilities.image",
        "sessionCapabilities.list",
        "sessionCapabilities.resume",
        "sessionCapabilities.delete",
        "futureThing",
    ]
    assert announced_capabilities({"promptCapabilities": {}, "mcpCapabilities": {}}) == []


def test_check_warns_of_an_agent_that_writes_the_home_folder(tmp_path):
    """docs/sandbox.md "Nothing writable holds the bridge": said under that agent, not the other."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    path = write_config(tmp_path, {"homely": scripted(cwd="~"), "apart": scripted(cwd=str(work))})
    env = {**{k: v for k, v in os.environ.items() if k != "XDG_CONFIG_HOME"}, "HOME": str(home)}
    result = checked(path, 0, env=env)
    assert f"⚠ agent homely writes your home folder ({home}): " in "\n".join(details(result.stdout, "homely"))
    assert not any("⚠" in line for line in details(result.stdout, "apart")), result.stdout
