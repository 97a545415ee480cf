"""The `!` commands the documentation names are the bridge's, and docs/commands.md lists every one.

The bridge's commands are the ones its help names (bridge/channels/rules/command_parse.py `HELP`,
`CHANNEL_HELP`) and the ones its parts register (their `COMMANDS`).
"""

from __future__ import annotations

import re
from pathlib import Path

from bridge.channels.commands.budgets import COMMANDS as BUDGETS
from bridge.channels.rules.command_parse import CHANNEL_HELP, HELP, SESSION_COMMANDS
from bridge.coding.settings import COMMANDS as SETTINGS
from bridge.coding.workplaces import COMMANDS as WORKPLACES
from bridge.voice.spoken import COMMANDS as VOICE

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "tests" / "README.md", ROOT / "deploy" / "README.md"]
PAGES += sorted((ROOT / "docs").glob("*.md"))
COMMAND = re.compile(r"(?<![\w!])!([a-z]+)\b")


def named(text: str) -> set[str]:
    return set(COMMAND.findall(text))


def test_the_documentation_names_only_commands_the_bridge_has():
    known = named(HELP) | named(CHANNEL_HELP)
    unknown = sorted(
        f"{page.relative_to(ROOT)}: !{name}"
        for page in PAGES
        for name in named(page.read_text(encoding="utf-8")) - known
    )
    assert not unknown, "commands the bridge's help does not name:\n" + "\n".join(unknown)


def test_commands_md_lists_every_command():
    every = named(HELP) | named(CHANNEL_HELP) | {*SESSION_COMMANDS, *SETTINGS, *WORKPLACES, *BUDGETS, *VOICE}
    listed = named((ROOT / "docs" / "commands.md").read_text(encoding="utf-8"))
    assert every <= listed, f"docs/commands.md lacks: {sorted(every - listed)}"


def test_the_pattern_finds_commands_and_nothing_else():
    assert named("type `!stop` or !budget channel; Hi! I am here, `!=`, !!x") == {"stop", "budget"}
