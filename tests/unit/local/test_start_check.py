"""The line `sidekicks up` says for an agent that cannot start (bridge/local/start_check.py). Pure.

The errors are the ones `check` reports (bridge/local/check.py `announced`, its agent name taken
off); each line names the agent, what failed and the key to change.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.local.start_check import trouble

PATH = "/home/me/.config/sidekicks/config.yaml"

CASES = [
    ("command not found: foo", f"agent alice: command `foo` not found — fix agents.alice.command in {PATH}"),
    (
        "command not executable: /opt/agent",
        f"agent alice: `/opt/agent` is not executable — fix agents.alice.command in {PATH} (or chmod +x it)",
    ),
    (
        "working directory not found: /work/x",
        f"agent alice: its folder /work/x does not exist — fix agents.alice.cwd in {PATH}",
    ),
    (
        "exited during initialize (exit code 1): /usr/bin/python3: No module named acp.agents.nope",
        "agent alice: stops at start (exit code 1: /usr/bin/python3: No module named acp.agents.nope) — "
        f"fix agents.alice.command in {PATH}; `sidekicks check` shows more",
    ),
    (
        "exited during initialize (exit code 3)",
        f"agent alice: stops at start (exit code 3) — fix agents.alice.command in {PATH}; `sidekicks check` shows more",
    ),
    (
        "no answer to initialize within 60 s",
        f"agent alice: no answer to initialize within 60 s — is agents.alice.command in {PATH} an ACP agent? "
        "`sidekicks check` shows more",
    ),
    (
        "requires authentication (Log in with Google); log in with the agent itself first",
        "agent alice: requires authentication (Log in with Google); log in with the agent itself first",
    ),
    (
        "sandbox cannot run: bubblewrap is not installed: no bwrap on PATH; install bubblewrap "
        "(apt-get install bubblewrap) or set sandbox: off for this agent",
        "agent alice: its sandbox cannot run (bubblewrap is not installed: no bwrap on PATH) — install "
        f"bubblewrap (apt-get install bubblewrap), or set agents.alice.sandbox: off in {PATH}",
    ),
    (
        "the ssh connection to box failed: ssh: connect to host box port 22: Connection refused",
        "agent alice: the ssh connection to box failed: ssh: connect to host box port 22: Connection refused"
        f" — check that host, or fix agents.alice.command in {PATH}",
    ),
    (
        "session/new returned no session id",
        f"agent alice: session/new returned no session id — `sidekicks check -c {PATH}` shows more",
    ),
]


@pytest.mark.parametrize("error,line", CASES, ids=[c[0][:24] for c in CASES])
def test_each_failure_is_one_line_with_the_fix(error, line):
    assert trouble("alice", error, PATH) == line


def test_the_agents_words_stay_on_one_line():
    said = trouble("alice", "exited during initialize (exit code 1): line one\nline two", PATH)
    assert "\n" not in said and "line one line two" in said


async def test_an_agent_without_a_sandbox_is_said_in_the_terminal_and_the_owner_s_dm(tmp_path):
    """docs/sandbox.md: `sandbox: off` is the owner's to know; an agent over ssh is not (its
    machine decides), and a sandboxed one that starts is not said either."""
    import sys

    import yaml

    import config
    from bridge.local.start_check import check_at_start

    scripted = str(Path(__file__).resolve().parents[2] / "agents" / "scripted_agent.py")
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "owner": "@me:localhost",
                "agents": {
                    "boxed": {"command": [sys.executable, scripted]},
                    "open": {"command": [sys.executable, scripted], "sandbox": "off"},
                },
            }
        )
    )
    said, told = [], []

    async def tell(text: str) -> None:
        told.append(text)

    failures = await check_at_start(config.load(path), said.append, tell)
    assert failures == []
    assert told == [
        "⚠️ agent open runs without a sandbox (agents.open.sandbox: off): it reaches what the "
        "bridge reaches — its config, data and registration included"
    ]
    assert "! " + told[0].removeprefix("⚠️ ") in said and "• checked 2 agents: each starts" in said
