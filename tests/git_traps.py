"""Traps an agent could set in its checkout so that git runs them (tests/unit/coding and
tests/integration/test_agent_wrote.py show the bridge's git runs none of them)."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path


def plant(repo: Path, marker: Path) -> None:
    """What an agent could write in its checkout so that git runs it: hooks, an fsmonitor,
    filters and a textconv named by .gitattributes (committed, as a project would), a filter
    process in an included config, each writing `marker`-NAME when run; and README modified."""

    def script(name: str) -> str:
        path = repo.parent / f"evil-{name}"
        path.write_text(f"#!/bin/sh\ntouch {marker}-{name}\ncat\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
        return str(path)

    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}-hook\n")
    hook.chmod(0o755)
    (repo / ".git" / "hooks" / "reference-transaction").write_text(f"#!/bin/sh\ntouch {marker}-ref\n")
    (repo / ".git" / "hooks" / "reference-transaction").chmod(0o755)
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n")

    def run(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    run("add", ".gitattributes")
    run("-c", "user.name=t", "-c", "user.email=t@t", "-c", "core.hooksPath=/dev/null", "commit", "-qm", "attributes")
    run("config", "core.fsmonitor", script("fsmonitor"))
    run("config", "filter.evil.smudge", script("smudge"))
    run("config", "filter.evil.clean", script("clean"))
    run("config", "filter.evil.required", "true")
    run("config", "diff.evil.textconv", script("textconv"))
    (repo.parent / "included").write_text(f'[filter "other"]\n\tprocess = {script("process")}\n')
    run("config", "include.path", str(repo.parent / "included"))
    (repo / "README").write_text("changed\n")  # a modified file: status hashes it (the clean filter)


def plant_conditional(repo: Path, marker: Path, condition: str = "gitdir:**/worktrees/**") -> None:
    """A filter defined only where `condition` holds: `[includeIf "<condition>"] path=evil.inc`
    in .git/config, evil.inc defining `filter.cond.smudge` (writing `marker`-cond when run), a
    committed `.gitattributes` naming it. Seen from the checkout's own git folder the condition
    is false; inside `worktrees/<name>` (gitdir:) or on the new branch (onbranch:) it is true."""
    script = repo.parent / "evil-cond"
    script.write_text(f"#!/bin/sh\ntouch {marker}-cond\ncat\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    (repo.parent / "evil.inc").write_text(f'[filter "cond"]\n\tsmudge = {script}\n')
    (repo / ".gitattributes").write_text("* filter=cond\n")

    def run(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    run("add", ".gitattributes")
    run("-c", "user.name=t", "-c", "user.email=t@t", "-c", "core.hooksPath=/dev/null", "commit", "-qm", "attributes")
    run("config", f"includeIf.{condition}.path", str(repo.parent / "evil.inc"))
