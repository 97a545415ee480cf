"""The argv and environment of the bridge's git calls (coding/safe_git.py): pure."""

from bridge.coding import safe_git


def config_of(env: dict[str, str]) -> dict[str, str]:
    return {env[f"GIT_CONFIG_KEY_{n}"]: env[f"GIT_CONFIG_VALUE_{n}"] for n in range(int(env["GIT_CONFIG_COUNT"]))}


def test_every_command_key_of_a_configured_driver_is_set_to_nothing():
    names = safe_git.key_names(
        "core.bare\0filter.lfs.smudge\0Diff.my.driver.TEXTCONV\0merge.ours.driver\0"
        "filter.lfs.clean\0user.name\0diff.noprefix\0filter.x\0alias.st\0"
    )
    assert safe_git.driver_overrides(names) == [
        ("filter.lfs.clean", ""),
        ("filter.lfs.smudge", ""),
        ("filter.lfs.process", ""),
        ("filter.lfs.required", "false"),
        ("diff.my.driver.textconv", ""),
        ("diff.my.driver.command", ""),  # a name with a dot, kept as it is
        ("merge.ours.driver", ""),
    ]
    assert safe_git.driver_overrides(["filter.A.process"])[0] == ("filter.A.clean", "")  # names keep their case
    assert safe_git.driver_overrides(["core.fsmonitor", "diff.external", "filter..smudge"]) == []


def test_the_environment_drops_the_bridges_git_variables_and_overrides_every_command():
    env = safe_git.env(
        {"PATH": "/bin", "HOME": "/home/o", "GIT_DIR": "/elsewhere", "GIT_SSH_COMMAND": "x", "GIT_EXTERNAL_DIFF": "y"},
        [("filter.a=b.smudge", "")],
    )
    assert env["PATH"] == "/bin" and env["HOME"] == "/home/o"
    assert "GIT_DIR" not in env and "GIT_SSH_COMMAND" not in env and "GIT_EXTERNAL_DIFF" not in env
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_CONFIG_GLOBAL"] == "/dev/null"
    assert env["GIT_ATTR_NOSYSTEM"] == "1" and env["GIT_TERMINAL_PROMPT"] == "0"
    config = config_of(env)
    assert config["core.hooksPath"] == "/dev/null" and config["core.fsmonitor"] == "false"
    assert config["protocol.allow"] == "never" and config["diff.external"] == ""
    assert config["filter.a=b.smudge"] == ""  # taken as it is: no `-c key=value` parsing
    assert list(config)[-1] == "filter.a=b.smudge"  # after the fixed ones


def test_the_git_folder_and_work_tree_are_named():
    assert safe_git.argv(["status", "--porcelain"], "/r/.git/worktrees/t", "/r.worktrees/t") == [
        "git",
        "--no-pager",
        "--git-dir=/r/.git/worktrees/t",
        "--work-tree=/r.worktrees/t",
        "status",
        "--porcelain",
    ]
    assert safe_git.argv(["rev-parse", "--show-toplevel"], folder="/r/src") == [
        "git",
        "--no-pager",
        "-C",
        "/r/src",
        "rev-parse",
        "--show-toplevel",
    ]


def test_a_conditional_include_is_found_whatever_its_condition_or_case():
    assert safe_git.conditional_include(["core.bare", "include.path", "filter.x.smudge"]) is None
    found = safe_git.conditional_include(["core.bare", "includeif.gitdir:**/worktrees/**.path"])
    assert found == "includeif.gitdir:**/worktrees/**.path"
    assert safe_git.conditional_include(["includeIf.onbranch:sidekicks/*.path"]) is not None
    assert "includeIf 'gitdir:**/worktrees/**'" in safe_git.refusal(found)
