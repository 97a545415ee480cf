"""Code and tests cite docs/ sections that exist, never a document outside the repository.

A citation is a docs/ page's path followed by one or more of its headings in double quotes,
comma separated, or the word README followed by a heading of README.md in double quotes; each
heading must be one of that page's Markdown headings. A citation of the product spec or the
design record by section number is refused: a maintainer who clones the repository cannot open
them. The documentation (README.md, docs/, tests/README.md, deploy/README.md) names files and
folders of the repository that must exist, and its links lead to pages, headings and sections
that exist.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ("bridge", "acp", "store", "config", "tests")
SUFFIXES = {".py", ".md", ".toml", ".yaml", ".sh", ""}

# spelt in two parts, so that this file does not cite them itself
OUTSIDE = re.compile(r"\b(?:" + "SP" + "EC|" + "AD" + r"R)\s*§|\bthe " + "AD" + r"R\b|\b" + "AD" + r"R['’]s\b")
DOCS = re.compile(r'\b(docs/[\w./-]+\.md)((?:\s+"[^"\n]+")(?:\s*,\s*"[^"\n]+")*)?')
README = re.compile(r'(?<!/)\bREADME(?:\.md)?(?:\'s)?,?\s+"([^"\n]+)"')
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
# a file or a folder (ending in /) of the repository, as the documentation names it
PATH = re.compile(
    r"(?<![\w/.<>-])((?:bridge|acp|store|config|tests|deploy|docs)/(?:[\w.@-]+/)*(?:[\w@-]+(?:\.\w+)*)?)(?![\w/])"
)
# a Markdown link to a file of the repository, its #anchor, and the headings quoted after it
LINK = re.compile(r'\]\(([^)\s#]*)(#[^)\s]*)?\)((?:\s+"[^"\n]+")(?:\s*,\s*"[^"\n]+")*)?')
PAGES = [
    ROOT / "README.md",
    ROOT / "tests" / "README.md",
    ROOT / "deploy" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]


def code_files() -> list[Path]:
    files = [ROOT / "pyproject.toml"]
    for top in CODE:
        for path in sorted((ROOT / top).rglob("*")):
            if (
                path.is_file()
                and path.suffix in SUFFIXES
                and "__pycache__" not in path.parts
                and path.name != "last-results.md"
            ):
                files.append(path)
    return files


def flat(text: str) -> str:
    """Lines joined, comment markers and indentation dropped: a citation may wrap."""
    return re.sub(r"\n[ \t]*(?:#[ \t]*)?", " ", text)


def headings(path: Path) -> set[str]:
    return {m.group(1).strip() for m in HEADING.finditer(path.read_text(encoding="utf-8"))}


def anchor(heading: str) -> str:
    """The #anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def test_nothing_cites_a_document_outside_the_repository():
    found = []
    for path in [*code_files(), *PAGES]:
        text = read(path)
        for number, line in enumerate((text or "").splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "cite docs/ instead:\n" + "\n".join(found)


def test_docs_citations_name_files_and_sections_that_exist():
    wrong = []
    for path in code_files():
        text = read(path)
        if text is None:
            continue
        for m in DOCS.finditer(flat(text)):
            target = ROOT / m.group(1)
            where = f"{path.relative_to(ROOT)}: {m.group(0).strip()}"
            if not target.is_file():
                wrong.append(f"{where}: no file {m.group(1)}")
                continue
            known = headings(target)
            for section in re.findall(r'"([^"\n]+)"', m.group(2) or ""):
                if section not in known:
                    wrong.append(f"{where}: {m.group(1)} has no section {section!r}")
    assert not wrong, "\n".join(wrong)


def test_readme_citations_name_sections_that_exist():
    known = headings(ROOT / "README.md")
    wrong = []
    for path in code_files():
        text = read(path)
        for m in README.finditer(flat(text or "")):
            if m.group(1) not in known:
                wrong.append(f"{path.relative_to(ROOT)}: README has no section {m.group(1)!r}")
    assert not wrong, "\n".join(wrong)


def test_the_documentation_names_files_that_exist():
    missing = []
    for page in PAGES:
        for m in PATH.finditer(page.read_text(encoding="utf-8")):
            if not (ROOT / m.group(1)).exists():
                missing.append(f"{page.relative_to(ROOT)}: {m.group(1)}")
    assert not missing, "files named in the documentation that are not in the repository:\n" + "\n".join(missing)


def test_the_documentation_links_and_cites_what_exists():
    """Links lead to files, #anchors to headings; the headings quoted after a link or a docs/
    path, or after README, are headings of that page."""
    readme = headings(ROOT / "README.md")
    wrong = []
    for page in PAGES:
        text = flat(page.read_text(encoding="utf-8"))
        here = page.relative_to(ROOT)
        for m in LINK.finditer(text):
            target, fragment, quoted = m.group(1), m.group(2), m.group(3)
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            linked = (page.parent / target) if target else page
            if not linked.exists():
                wrong.append(f"{here}: link to {target}, which does not exist")
                continue
            if linked.suffix != ".md":
                continue
            known = headings(linked)
            if fragment and fragment[1:] not in {anchor(h) for h in known}:
                wrong.append(f"{here}: {target}{fragment}: no such heading")
            for section in re.findall(r'"([^"\n]+)"', quoted or ""):
                if section not in known:
                    wrong.append(f"{here}: {target or here} has no section {section!r}")
        for m in DOCS.finditer(text):
            cited = ROOT / m.group(1)
            known = headings(cited) if cited.is_file() else set()
            for section in re.findall(r'"([^"\n]+)"', m.group(2) or ""):
                if section not in known:
                    wrong.append(f"{here}: {m.group(1)} has no section {section!r}")
        for m in README.finditer(text):
            if m.group(1) not in readme:
                wrong.append(f"{here}: README has no section {m.group(1)!r}")
    assert not wrong, "\n".join(wrong)


def test_the_checks_catch_what_they_look_for():
    """The patterns find a citation of an outside document, and a wrapped docs/ citation whole."""
    assert OUTSIDE.search("who answers (" + "SP" + "EC §6)")
    assert OUTSIDE.search("# as the " + "AD" + "R says")
    assert not OUTSIDE.search("--commands " + "SP" + "EC  name:description")
    m = DOCS.search(flat('(docs/architecture.md "Who answers",\n    # "What each agent reads")'))
    assert m is not None and re.findall(r'"([^"]+)"', m.group(2)) == ["Who answers", "What each agent reads"]
    named = "in `bridge/channels/turns/`, bridge/gone.py. `deploy/systemd/sidekicks-bridge@.service`, ~/.config/x.yaml"
    assert [m.group(1) for m in PATH.finditer(named)] == [
        "bridge/channels/turns/",
        "bridge/gone.py",
        "deploy/systemd/sidekicks-bridge@.service",
    ]
    link = LINK.search('see [sessions.md](sessions.md#queue-or-steer) "Handoff", "Queue or steer".')
    assert link is not None and link.groups()[:2] == ("sessions.md", "#queue-or-steer")
    assert anchor("The local agent's first token") == "the-local-agents-first-token"
