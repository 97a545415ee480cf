"""An agent that wants a login (bridge/channels/rules/logins.py): the owner's one line, the method
the bridge runs itself. Pure."""

from __future__ import annotations

from bridge.channels.rules.logins import (
    agent_method,
    asked_line,
    failed_line,
    login_line,
    method_type,
    terminal_command,
)

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


def test_a_page_the_login_asks_for_is_told_by_its_host_first_then_the_link():
    safe = ("https://accounts.example.com/o/oauth2/auth?x=1", "accounts.example.com")
    assert asked_line("Gemini", GEMINI, safe, "  Sign in\n to continue ") == (
        "🔑 Gemini is logging in (Log in with Google): open a page on accounts.example.com: "
        "https://accounts.example.com/o/oauth2/auth?x=1 (Sign in to continue); "
        "your message waits and is answered once it is logged in."
    )
    assert asked_line("Gemini", GEMINI, safe).startswith("🔑 Gemini is logging in (Log in with Google): open a page")
    hidden = asked_line("Gemini", GEMINI, None, "go here")
    assert "not a plain http(s) link; it is not shown (go here): log in with it on this machine;" in hidden
    assert len(asked_line("G", GEMINI, safe, "x" * 5000)) < 400  # what it says is capped


def test_a_failed_login_is_one_line_and_the_message_waits():
    line = failed_line("Gemini", GEMINI, "Login failed:\n the page was closed")
    assert line == (
        "🔑 Gemini could not log in (Log in with Google): Login failed: the page was closed; "
        "your message waits and is answered once it is logged in "
        "(log in with it on this machine, or `!stop` and send it again to try again)."
    )
    assert "\n" not in failed_line("G", GEMINI, "a\nb" * 1000) and "no reason given" in failed_line("G", GEMINI, "")
