"""The line `sidekicks up` says for an agent that cannot start (bridge/local/start_check.py). Pure.

The errors are the ones `check` reports (bridge/local/check.py `announced`, its agent name taken
off); each line names the agent, what failed and the key to change.
"""
from __future__ import annotations

import pytest

from bridge.local.start_check import trouble

PATH = "/home/me/.config/sidekicks/config.yaml"

CASES = [
    ("command not found: foo",
     f"agent alice: command `foo` not found — fix agents.alice.command in {PATH}"),
    ("command not executable: /opt/agent",
     f"agent alice: `/opt/agent` is not executable — fix agents.alice.command in {PATH} (or chmod +x it)"),
    ("working directory not found: /work/x",
     f"agent alice: its folder /work/x does not exist — fix agents.alice.cwd in {PATH}"),
    ("exited during initialize (exit code 1): /usr/bin/python3: No module named acp.agents.nope",
     "agent alice: stops at start (exit code 1: /usr/bin/python3: No module named acp.agents.nope) — "
     f"fix agents.alice.command in {PATH}; `sidekicks check` shows more"),
    ("exited during initialize (exit code 3)",
     f"agent alice: stops at start (exit code 3) — fix agents.alice.command in {PATH}; `sidekicks check` shows more"),
    ("no answer to initialize within 60 s",
     f"agent alice: no answer to initialize within 60 s — is agents.alice.command in {PATH} an ACP agent? "
     "`sidekicks check` shows more"),
    ("requires authentication (Log in with Google); log in with the agent itself first",
     "agent alice: requires authentication (Log in with Google); log in with the agent itself first"),
    ("session/new returned no session id",
     f"agent alice: session/new returned no session id — `sidekicks check -c {PATH}` shows more"),
]


@pytest.mark.parametrize("error,line", CASES, ids=[c[0][:24] for c in CASES])
def test_each_failure_is_one_line_with_the_fix(error, line):
    assert trouble("alice", error, PATH) == line


def test_the_agents_words_stay_on_one_line():
    said = trouble("alice", "exited during initialize (exit code 1): line one\nline two", PATH)
    assert "\n" not in said and "line one line two" in said
