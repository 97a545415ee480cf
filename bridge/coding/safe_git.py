"""How the bridge runs git in a checkout an agent works in: nothing the checkout names is run.
Pure: the argv and the environment of a call (coding/worktrees.py runs it; unit-tested in
tests/unit/coding/test_coding_safe_git.py). Why: docs/SECURITY.md.

An agent can write anything in its checkout: `.git/hooks/*`, `.git/config` (and any file it
includes), `.gitattributes`, the `.git` file of a worktree. Git would run commands from each
when the bridge makes a thread's worktree or asks its status. So every call:

* reads no system or global config (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`, no
  system attributes) and none of the bridge's own `GIT_*` variables;
* sets, in the command scope (which wins over every config file, included ones too), each key
  that names a command to nothing runnable: hooks (`core.hooksPath=/dev/null`), fsmonitor,
  the pager, editors, ssh, every transport (`protocol.allow=never`: no fetch, so no credential
  helper, proxy or ssh command), auto gc and maintenance;
* sets the command keys of every filter, diff and merge driver the checkout's config defines
  (`driver_overrides`, from the names `git config --list --name-only` reads, includes followed)
  to nothing: `.gitattributes` may name those drivers, and with no command git applies none;
* is refused (`conditional_include`) when the checkout's config holds a conditional include
  (`includeIf`, whatever its condition): git evaluates `gitdir:`, `onbranch:` and `hasconfig:`
  again in every process, and a child git (`worktree add` runs `reset --hard` inside
  `worktrees/<name>`) would read, where its condition holds, driver commands the listing below
  did not see; a plain `include` is read with `--includes`, the same everywhere;
* names the git folder and the work tree itself (`--git-dir`, `--work-tree`): a `.git` file
  the agent rewrote is never followed, and a `core.worktree` in its config is overridden;
* has no pager (`--no-pager`), no terminal prompt, no optional locks (`git status` does not
  write the index).

Aliases need nothing: git never lets an alias replace one of its own commands, and the bridge
runs only those (`rev-parse`, `worktree`, `status`, `config`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# set on every call, over whatever the checkout's config says
FIXED: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),  # no hook is found there
    ("core.fsmonitor", "false"),
    ("core.sshCommand", "false"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("sequence.editor", "false"),
    ("core.askPass", ""),
    ("credential.helper", ""),  # an empty value clears the list of helpers
    ("diff.external", ""),
    ("core.attributesFile", "/dev/null"),
    ("protocol.allow", "never"),
    ("submodule.recurse", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)

# per driver section, the keys that make it run something, and what they are set to (an empty
# command is none: git applies no filter, no textconv; `required` off, or a filter with no
# command would fail the checkout)
DRIVERS: dict[str, dict[str, str]] = {
    "filter": {"clean": "", "smudge": "", "process": "", "required": "false"},
    "diff": {"textconv": "", "command": ""},
    "merge": {"driver": ""},
}

ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_PAGER": "cat",
    "GIT_EDITOR": "false",
    "GIT_SEQUENCE_EDITOR": "false",
    "LC_ALL": "C",
}

LIST_CONFIG = ("config", "-z", "--list", "--name-only", "--includes")  # every key name, NUL-ended


def key_names(listed: str) -> list[str]:
    """The key names of `git config -z --list --name-only` (NUL-ended)."""
    return [name for name in listed.split("\0") if name]


def conditional_include(names: Iterable[str]) -> str | None:
    """The first conditional include (`includeif.<condition>.path`, as git lists it: section
    lowered) among the key names; None if there is none."""
    for name in names:
        if name.lower().startswith("includeif."):
            return name
    return None


def refusal(found: str) -> str:
    """The one line a checkout with a conditional include gets."""
    condition = found[len("includeif.") :].rpartition(".")[0]
    return (
        f"its git config has a conditional include (includeIf {condition!r}): the bridge runs no git "
        "there (remove it from .git/config, or the file that includes it)"
    )


def driver_overrides(names: Iterable[str]) -> list[tuple[str, str]]:
    """For every driver a config key names (`filter.<driver>.smudge` …, the driver's name
    possibly holding dots), each of its command keys set to nothing — all of them, whichever
    one was seen. Section and key are case-insensitive (git lowers them), the driver's name is
    not."""
    found: list[tuple[str, str]] = []
    for name in names:
        section, dot, rest = name.partition(".")
        driver, dot2, key = rest.rpartition(".")
        if not dot or not dot2 or not driver:
            continue
        keys = DRIVERS.get(section.lower())
        if keys is None or key.lower() not in keys:
            continue
        for key_name, value in keys.items():
            override = (f"{section.lower()}.{driver}.{key_name}", value)
            if override not in found:
                found.append(override)
    return found


def argv(
    args: Iterable[str], git_dir: str | None = None, work_tree: str | None = None, folder: str | None = None
) -> list[str]:
    """`git …` with the git folder and work tree named (`folder`: `-C`, for finding a checkout,
    where neither is known yet)."""
    command = ["git", "--no-pager"]
    if folder is not None:
        command += ["-C", folder]
    if git_dir is not None:
        command.append(f"--git-dir={git_dir}")
    if work_tree is not None:
        command.append(f"--work-tree={work_tree}")
    return command + list(args)


def env(environ: Mapping[str, str], overrides: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
    """The call's environment: the bridge's own without any `GIT_*`, ENV, and every override
    of FIXED then `overrides` in the command scope (GIT_CONFIG_COUNT/KEY/VALUE: a value is
    taken as it is, a driver's name may hold any character)."""
    made = {name: value for name, value in environ.items() if not name.startswith("GIT_")}
    made.update(ENV)
    pairs = [*FIXED, *overrides]
    made["GIT_CONFIG_COUNT"] = str(len(pairs))
    for number, (key, value) in enumerate(pairs):
        made[f"GIT_CONFIG_KEY_{number}"] = key
        made[f"GIT_CONFIG_VALUE_{number}"] = value
    return made
