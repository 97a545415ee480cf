"""An agent that wants a login (bridge/channels/rules/logins.py): the owner's one line, the method
the bridge runs itself. Pure."""

from __future__ import annotations

from bridge.channels.rules.logins import agent_method, login_line, method_type, terminal_command

COMMAND = ["npx", "-y", "@agentclientprotocol/claude-agent-acp@0.30.0"]
# as Claude Code's adapter announces them to a client offering terminal logins
CLAUDE = {
    "id": "claude-ai-login",
    "name": "Claude Subscription",
    "type": "terminal",
    "args": ["--cli", "auth", "login", "--claudeai"],
}
GEMINI = {"id": "oauth-personal", "name": "Log in with Google", "description": None}


def test_a_methods_type_is_its_type_else_its_meta_else_agent():
    assert method_type(CLAUDE) == "terminal"
    assert method_type({"id": "x", "_meta": {"terminal-auth": {"command": "x"}}}) == "terminal"
    assert method_type(GEMINI) == "agent"
    assert agent_method([CLAUDE, GEMINI]) is GEMINI
    assert agent_method([CLAUDE]) is None


def test_a_terminal_login_is_the_agents_command_with_the_methods_args():
    assert terminal_command(CLAUDE, COMMAND) == (
        "npx -y @agentclientprotocol/claude-agent-acp@0.30.0 --cli auth login --claudeai"
    )
    named = {"id": "x", "_meta": {"terminal-auth": {"command": "/usr/bin/node", "args": ["cli.js", "login"]}}}
    assert terminal_command(named, COMMAND) == "/usr/bin/node cli.js login"
    with_env = {"id": "x", "type": "terminal", "args": ["--setup"], "env": {"MODE": "a b"}}
    assert terminal_command(with_env, ["agent"]) == "MODE='a b' agent --setup"


def test_the_owners_line_says_what_to_do_and_that_the_message_waits():
    assert login_line("Claude Code", COMMAND, [CLAUDE, GEMINI]) == (
        "🔑 Claude Code needs a login: run once on this machine "
        "`npx -y @agentclientprotocol/claude-agent-acp@0.30.0 --cli auth login --claudeai` (Claude Subscription); "
        "your message waits and is answered once it is logged in."
    )
    assert login_line("Gemini", COMMAND, [GEMINI]).startswith(
        "🔑 Gemini needs a login: it is logging in (Log in with Google), follow what it asks;"
    )
    assert "names no way to do it" in login_line("X", COMMAND, [])
