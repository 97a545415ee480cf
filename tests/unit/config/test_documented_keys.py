"""The config keys the documentation shows are the keys the loader reads, and every key the
loader reads is shown somewhere (docs/configuration.md "Every key", and the pages it points to).

A key is shown in a YAML example of a config (a ```yaml block of README.md, docs/ or
deploy/README.md whose top-level keys are all config keys) or in a row of configuration.md's
key tables. Keys are checked against config/loader.py `KNOWN_KEYS`, section by section.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from config.loader import KNOWN_KEYS

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", ROOT / "deploy" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
YAML_BLOCK = re.compile(r"```yaml\n(.*?)```", re.DOTALL)
# configuration.md: a `### section` heading, then table rows whose first cell is a `key`
TABLE_SECTION = {"owner": "", "homeserver": "homeserver", "appservice": "appservice", "agents": "agents.*"}
TABLE_SECTION |= {"limits": "limits", "database and encryption": ""}


def sections(data: dict, section: str = "") -> list[tuple[str, str]]:
    """(section, key) for every key of a config mapping, into the sections KNOWN_KEYS has."""
    found = []
    for key, value in data.items():
        found.append((section, str(key)))
        inner = f"{section}.{key}" if section else str(key)
        if section == "" and key == "agents" and isinstance(value, dict):
            for spec in value.values():
                if isinstance(spec, dict):
                    found += sections(spec, "agents.*")
        elif inner in KNOWN_KEYS and isinstance(value, dict):
            found += sections(value, inner)
    return found


def config_examples() -> list[tuple[Path, dict]]:
    examples = []
    for page in PAGES:
        for block in YAML_BLOCK.findall(page.read_text(encoding="utf-8")):
            data = yaml.safe_load(block)
            if isinstance(data, dict) and set(data) <= set(KNOWN_KEYS[""]):
                examples.append((page, data))
    return examples


def table_keys() -> list[tuple[str, str]]:
    found, section = [], None
    for line in (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8").splitlines():
        if heading := re.match(r"###\s+(.+)", line):
            section = TABLE_SECTION.get(heading.group(1).strip())
        elif section is not None and (row := re.match(r"\|\s*`([\w.]+)`\s*\|", line)):
            key = row.group(1)
            found.append((section, key[len(section) + 1 :] if section and key.startswith(section + ".") else key))
    return found


def test_every_key_the_documentation_shows_is_read_by_the_loader():
    shown = [(str(page.relative_to(ROOT)), s, k) for page, data in config_examples() for s, k in sections(data)]
    shown += [("docs/configuration.md", s, k) for s, k in table_keys()]
    unknown = [f"{page}: {s + '.' if s else ''}{k}" for page, s, k in shown if k not in KNOWN_KEYS.get(s, ())]
    assert not unknown, "keys the loader does not read:\n" + "\n".join(unknown)


def test_every_key_the_loader_reads_is_shown_in_the_documentation():
    shown = {pair for _, data in config_examples() for pair in sections(data)} | set(table_keys())
    missing = [f"{s + '.' if s else ''}{k}" for s, keys in KNOWN_KEYS.items() for k in keys if (s, k) not in shown]
    assert not missing, "keys no documentation shows:\n" + "\n".join(missing)


def test_the_examples_and_tables_are_found():
    """The checks above read something: README's full example and configuration.md's tables."""
    assert any(page.name == "README.md" and "agents" in data for page, data in config_examples())
    assert ("homeserver", "device_traffic") in table_keys() and ("agents.*", "worktrees") in table_keys()
