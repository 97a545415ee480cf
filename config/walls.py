"""What no path an agent can write may hold (docs/sandbox.md "Nothing writable holds the bridge",
"The owner's credentials"). Pure but for `installation()` and `program_folders()`, which read
the running interpreter and its PATH.

- `bridge_paths`: the bridge's own paths, each with what it is. Hidden from every sandboxed
  agent: the user's sidekicks folder (every config's data folder: owner passwords, stores,
  embedded homeservers), the config's folder and file, its data folder, the registration, the
  homeserver's config and the folder it is in (unless that is the home folder or above it).
  Read-only wherever an agent writes around them: the installation (its virtual environment, its
  package folder, Python's standard library), the folders the bridge finds its programs in
  (bwrap, git, ssh: its PATH), the user's systemd units and the shell's start-up files.
  acp/sandbox.py pins every folder between a writable path and one of these, so none can be
  renamed away and replaced.
- `refusals`: what the config cannot ask for — a writable path that is, or lies in, one of the
  bridge's paths (but the config's folder, whose contents that matter are hidden one by one), or
  a symbolic link on the way to one inside a writable path (a link is no mount point: it could
  be pointed elsewhere).
- `credentials`: the well-known credential stores of the home folder, hidden unless the agent's
  `read:` or `write:` (or `cwd`) names one.
- `guarded`: folders made (empty) where an agent writes around them and they are missing, so that
  they are hidden or read-only rather than the agent's to make (`~/.config/systemd/user/…`).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath

CREDENTIALS = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".config/hub",
    ".password-store",
    ".local/share/keyrings",
    ".pki",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials.toml",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".config/rclone",
    ".s3cfg",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
)
START_FILES = (
    ".profile",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".zshenv",
    ".zprofile",
    ".zshrc",
    ".zlogin",
    ".zlogout",
    ".config/fish",
)
USER_UNITS = ".config/systemd"

HIDDEN = "hidden"
PROTECTED = "protected"


def under(path: str, folder: str) -> bool:
    """`path` is `folder` or lies below it."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def installation() -> tuple[str, ...]:
    """The bridge's installation: its virtual environment, Python's standard library, the folder
    its packages are in (the checkout, with `pip install -e`)."""
    package = str(Path(__file__).resolve().parents[1])
    stdlib = sysconfig.get_paths().get("stdlib", "")
    return tuple(dict.fromkeys(p for p in (sys.prefix, stdlib, package) if p))


def program_folders(path_variable: str | None = None) -> tuple[str, ...]:
    """The absolute folders of the bridge's PATH: where it finds bwrap, git and ssh."""
    value = os.environ.get("PATH", "") if path_variable is None else path_variable
    return tuple(dict.fromkeys(p.rstrip("/") or "/" for p in value.split(os.pathsep) if os.path.isabs(p)))


def bridge_paths(
    *,
    home: str,
    config_root: str,
    config_path: str,
    data_dir: str,
    registration: str,
    homeserver_config: str | None,
    install: Sequence[str],
    programs: Sequence[str],
) -> dict[str, tuple[str, str]]:
    """Each of the bridge's paths → (HIDDEN or PROTECTED, what it is)."""
    found: dict[str, tuple[str, str]] = {}

    def add(path: str | None, how: str, what: str) -> None:
        if path and path != "/" and path not in found:
            found[path] = (how, what)

    add(config_path, HIDDEN, "config file")
    add(data_dir, HIDDEN, "data folder")
    add(config_root, HIDDEN, "folder of every config's data (owner passwords, stores)")
    add(registration, HIDDEN, "registration")
    add(homeserver_config, HIDDEN, "homeserver's config")
    folder = os.path.dirname(homeserver_config) if homeserver_config else None
    if folder and not under(home, folder):  # its database and keys beside it; not a whole home
        add(folder, HIDDEN, "homeserver's folder")
    for path in install:
        add(path, PROTECTED, "installation")
    for path in programs:
        add(path, PROTECTED, "programs folder (on its PATH)")
    add(os.path.join(home, USER_UNITS), PROTECTED, "systemd units")
    for name in START_FILES:
        add(os.path.join(home, name), PROTECTED, "shell start-up file")
    return found


def of_config(config_path: Path, data_dir: Path, registration: Path, homeserver_config: Path | None) -> dict:
    """`bridge_paths` of one config, for the running bridge (its home, installation, PATH)."""
    from .paths import user_config_root

    return bridge_paths(
        home=os.path.expanduser("~"),
        config_root=str(user_config_root()),
        config_path=str(config_path),
        data_dir=str(data_dir),
        registration=str(registration),
        homeserver_config=str(homeserver_config) if homeserver_config else None,
        install=installation(),
        programs=program_folders(),
    )


def credentials(home: str, named: Sequence[str]) -> tuple[str, ...]:
    """The credential stores to hide: all of CREDENTIALS but those `named` exactly."""
    return tuple(p for p in (os.path.join(home, c) for c in CREDENTIALS) if p not in named)


def guarded(home: str, config_root: str, programs: Sequence[str]) -> tuple[str, ...]:
    """Folders made where an agent writes around them and they are missing."""
    return tuple(dict.fromkeys((config_root, os.path.join(home, USER_UNITS), os.path.join(home, ".ssh"), *programs)))


def refusals(
    writable: Mapping[str, Sequence[str]],
    paths: Mapping[str, tuple[str, str]],
    config_folder: str,
    resolve: Callable[[str], str] = os.path.realpath,
    is_link: Callable[[str], bool] = os.path.islink,
) -> list[tuple[str, str]]:
    """(key, why) for each writable path (`writable`: config key → its paths, links resolved)
    that is or lies in one of the bridge's `paths`, or holds a symbolic link on the way to one."""
    real = {resolve(p): entry for p, entry in paths.items()}
    found: list[tuple[str, str]] = []
    for key, folders in writable.items():
        for folder in folders:
            inside = [(p, what) for p, (_, what) in real.items() if under(folder, p)]
            if inside:
                path, what = max(inside, key=lambda item: len(item[0]))
                where = "is" if path == folder else f"lies in {path},"
                found.append(
                    (key, f"{folder} {where} the bridge's {what}: an agent writing there could change the bridge")
                )
                continue
            link = next((q for p in paths if p != config_folder for q in _links(p, folder, resolve, is_link)), None)
            if link is not None:
                found.append(
                    (
                        key,
                        f"{folder} holds {link}, a symbolic link on the way to the bridge's files: an agent "
                        "writing there could point it elsewhere; replace the link with what it points to",
                    )
                )
    return found


def _links(path: str, folder: str, resolve: Callable[[str], str], is_link: Callable[[str], bool]) -> list[str]:
    """The symbolic links on the way to `path` (itself included) that lie in `folder`."""
    found = []
    steps = PurePosixPath(path)
    for step in (*reversed(steps.parents), steps):
        text = str(step)
        if text != "/" and is_link(text) and under(resolve(str(step.parent)), folder):
            found.append(text)
    return found
