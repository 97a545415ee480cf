"""config/walls.py: what no path an agent can write may hold (docs/sandbox.md "Nothing writable
holds the bridge", "The owner's credentials"); pure, the file system given as functions."""

from __future__ import annotations

import sys

from config import walls

HOME = "/home/me"


def paths(**changed) -> dict[str, tuple[str, str]]:
    given = {
        "home": HOME,
        "config_root": f"{HOME}/.config/sidekicks",
        "config_path": f"{HOME}/.config/sidekicks/config.yaml",
        "data_dir": f"{HOME}/.config/sidekicks/data/abc",
        "registration": f"{HOME}/.config/sidekicks/registration.yaml",
        "homeserver_config": None,
        "install": (f"{HOME}/sidekicks/.venv", f"{HOME}/sidekicks"),
        "programs": (f"{HOME}/sidekicks/.venv/bin", f"{HOME}/.local/bin", "/usr/bin"),
    }
    return walls.bridge_paths(**{**given, **changed})


def refused(writable: dict, found: dict | None = None, links=(), config_folder=f"{HOME}/.config/sidekicks"):
    return walls.refusals(writable, found or paths(), config_folder, resolve=lambda p: p, is_link=lambda p: p in links)


def test_the_bridge_s_paths_hidden_or_read_only():
    found = paths()
    hidden = [p for p, (how, _) in found.items() if how == walls.HIDDEN]
    assert hidden == [
        f"{HOME}/.config/sidekicks/config.yaml",
        f"{HOME}/.config/sidekicks/data/abc",
        f"{HOME}/.config/sidekicks",  # every config's data folder: other owner passwords too
        f"{HOME}/.config/sidekicks/registration.yaml",
    ]
    protected = {p for p, (how, _) in found.items() if how == walls.PROTECTED}
    assert {
        f"{HOME}/sidekicks/.venv",
        f"{HOME}/sidekicks",
        f"{HOME}/.local/bin",  # where the bridge finds bwrap, git, ssh
        f"{HOME}/.config/systemd",
        f"{HOME}/.bashrc",
        f"{HOME}/.profile",
        f"{HOME}/.bash_profile",
        f"{HOME}/.zshrc",
    } <= protected


def test_the_homeserver_s_folder_is_hidden_unless_it_is_the_home_folder():
    found = paths(homeserver_config=f"{HOME}/.local/share/synapse/homeserver.yaml")
    assert found[f"{HOME}/.local/share/synapse"] == (walls.HIDDEN, "homeserver's folder")
    assert HOME not in paths(homeserver_config=f"{HOME}/homeserver.yaml")


def test_a_writable_path_around_the_bridge_s_paths_is_allowed():
    assert refused({"agents.a.cwd": [HOME]}) == []
    # the config's own folder (here a project's) may hold the working directory: what matters
    # in it (the config file, relative registration) is hidden one by one
    project = paths(config_path=f"{HOME}/proj/sidekicks.yaml", registration=f"{HOME}/proj/reg.yaml")
    assert refused({"agents.a.cwd": [f"{HOME}/proj/src"]}, project, config_folder=f"{HOME}/proj") == []


def test_a_writable_path_in_the_bridge_s_paths_is_refused_naming_it():
    assert refused(
        {
            "agents.a.cwd": [f"{HOME}/sidekicks/bridge"],
            "agents.a.sandbox.write": [f"{HOME}/.config/sidekicks/data/other", f"{HOME}/.local/bin"],
        }
    ) == [
        (
            "agents.a.cwd",
            f"{HOME}/sidekicks/bridge lies in {HOME}/sidekicks, the bridge's installation: an agent writing "
            "there could change the bridge",
        ),
        (
            "agents.a.sandbox.write",
            f"{HOME}/.config/sidekicks/data/other lies in {HOME}/.config/sidekicks, the bridge's folder of "
            "every config's data (owner passwords, stores): an agent writing there could change the bridge",
        ),
        (
            "agents.a.sandbox.write",
            f"{HOME}/.local/bin is the bridge's programs folder (on its PATH): an agent writing there could "
            "change the bridge",
        ),
    ]
    assert refused({"agents.a.sandbox.write": [f"{HOME}/.bashrc"]})[0][1].startswith(
        f"{HOME}/.bashrc is the bridge's shell start-up file"
    )


def test_a_link_on_the_way_to_the_bridge_s_paths_is_refused():
    """A link is no mount point: it could be pointed elsewhere (a dotfile manager's ~/.bashrc)."""
    assert refused({"agents.a.cwd": [HOME]}, links=[f"{HOME}/.bashrc"]) == [
        (
            "agents.a.cwd",
            f"{HOME} holds {HOME}/.bashrc, a symbolic link on the way to the bridge's files: an agent "
            "writing there could point it elsewhere; replace the link with what it points to",
        )
    ]
    assert refused({"agents.a.cwd": [f"{HOME}/code"]}, links=[f"{HOME}/.config"]) == []  # not in it


def test_credential_stores_hidden_unless_named():
    hidden = walls.credentials(HOME, [f"{HOME}/code", f"{HOME}/.aws"])
    assert f"{HOME}/.ssh" in hidden and f"{HOME}/.docker/config.json" in hidden
    assert f"{HOME}/.aws" not in hidden


def test_guarded_folders_and_the_running_installation():
    assert walls.guarded(HOME, f"{HOME}/.config/sidekicks", [f"{HOME}/.local/bin"]) == (
        f"{HOME}/.config/sidekicks",
        f"{HOME}/.config/systemd",
        f"{HOME}/.ssh",
        f"{HOME}/.local/bin",
    )
    assert sys.prefix in walls.installation()
    assert walls.program_folders("/a/bin:relative::/usr/bin/") == ("/a/bin", "/usr/bin")
