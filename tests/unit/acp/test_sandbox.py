"""acp/sandbox.py: a policy turned into bwrap's command line (pure); and, at the end, that
command line run by real bubblewrap (the order of the mounts is what decides what is reached)."""

from __future__ import annotations

import os
import shutil
import subprocess

from acp.sandbox import (
    ENV_KEPT,
    HIDE_DIR,
    HIDE_FILE,
    PIN,
    REACH,
    READ,
    WRITE,
    Mount,
    Sandbox,
    argv,
    environment,
    mounts,
    probe_argv,
    resolver,
    run_folders,
)


def pairs(line: list[str]) -> list[tuple[str, ...]]:
    """The options of a bwrap command line as tuples: ("--bind", src, dst), ("--tmpfs", dst)…"""
    takes = {
        "--perms": 1,
        "--bind": 2,
        "--ro-bind": 2,
        "--tmpfs": 1,
        "--dev": 1,
        "--proc": 1,
        "--chdir": 1,
        "--cap-drop": 1,
        "--info-fd": 1,
        "--block-fd": 1,
    }
    found, i = [], 1
    while i < len(line) and line[i] != "--":
        n = takes.get(line[i], 0)
        found.append(tuple(line[i : i + 1 + n]))
        i += 1 + n
    return found


def test_the_system_is_read_only_with_its_own_processes_tmp_and_no_capabilities():
    line = argv(Sandbox(), ["agent", "--acp"], "/work", {"/work": "dir", "/tmp": "dir"})
    options = pairs(line)
    assert options[:7] == [
        ("--new-session",),
        ("--unshare-pid",),
        ("--unshare-net",),  # a network of its own, whatever `network:` says (acp/netns.py)
        ("--die-with-parent",),  # its parent is the supervisor, which outlives the bridge briefly
        ("--cap-drop", "ALL"),
        ("--ro-bind", "/", "/"),
        ("--dev", "/dev"),
    ]
    assert ("--proc", "/proc") in options and ("--tmpfs", "/tmp") in options
    assert line[-4:] == ["/work", "--", "agent", "--acp"] and line[-5] == "--chdir"
    assert ("--bind", "/work", "/work") in options


def test_the_network_is_unshared_on_and_off_and_set_up_through_the_info_and_block_fds():
    assert "--unshare-net" in argv(Sandbox(network=False), ["a"], "/w", {"/w": "dir"})
    options = pairs(argv(Sandbox(), ["a"], "/w", {"/w": "dir"}, fds=(7, 9)))
    assert ("--unshare-net",) in options and ("--info-fd", "7") in options and ("--block-fd", "9") in options
    assert not any(o[0] in ("--info-fd", "--block-fd") for o in pairs(argv(Sandbox(), ["a"], "/w", {"/w": "dir"})))


def test_run_is_emptied_with_only_what_name_resolution_needs_bound_back():
    # systemd-resolved: /etc/resolv.conf leads into /run; its folder comes back, nothing else
    assert run_folders("/run/systemd/resolve/stub-resolv.conf", ["/run"]) == (("/run",), ("/run/systemd/resolve",))
    assert run_folders("/etc/resolv.conf", ["/run", "/var/run"]) == (("/run", "/var/run"), ())
    hidden, kept = run_folders("/run/systemd/resolve/resolv.conf", ["/run"])
    box = Sandbox(hide=hidden, keep=kept)
    kinds = {"/run": "dir", "/run/systemd/resolve": "dir", "/w": "dir", "/tmp": "dir"}
    options = pairs(argv(box, ["a"], "/w", kinds))
    assert options.index(("--tmpfs", "/run")) < options.index(
        ("--ro-bind", "/run/systemd/resolve", "/run/systemd/resolve")
    )


def test_hidden_folders_become_empty_and_hidden_files_dev_null():
    kinds = {"/w": "dir", "/etc/sk": "dir", "/srv/registration.yaml": "file"}
    options = pairs(argv(Sandbox(hide=("/etc/sk", "/srv/registration.yaml", "/gone")), ["a"], "/w", kinds))
    assert options[options.index(("--tmpfs", "/etc/sk")) - 1] == ("--perms", "0555")  # nothing written there
    assert ("--ro-bind", "/dev/null", "/srv/registration.yaml") in options
    assert not any("/gone" in option for option in options)  # not on disk: nothing to hide


def test_a_deeper_mount_wins_whatever_its_kind():
    """The tests' layout: config, data and agent folders in one tmp folder."""
    kinds = {
        "/t": "dir",
        "/t/cfg": "dir",
        "/t/cfg/work": "dir",
        "/t/cfg/work/data": "dir",
        "/t/cfg/config.yaml": "file",
        "/tmp": "dir",
    }
    box = Sandbox(read=("/t",), hide=("/t/cfg", "/t/cfg/work/data", "/t/cfg/config.yaml"))
    order = mounts(box, "/t/cfg/work", kinds)
    assert order == [
        Mount(HIDE_DIR, "/tmp"),
        Mount(READ, "/t"),
        Mount(HIDE_DIR, "/t/cfg"),
        Mount(WRITE, "/t/cfg/work"),
        Mount(HIDE_DIR, "/t/cfg/work/data"),
    ]
    # config.yaml lies in a hidden folder: no mount of its own; it needs one where the folder shows
    shown = mounts(Sandbox(hide=("/t/cfg/config.yaml",), keep=("/t/cfg",)), "/w", {**kinds, "/w": "dir"})
    assert Mount(HIDE_FILE, "/t/cfg/config.yaml") in shown


def test_at_one_depth_hidden_then_read_then_written_then_reached():
    kinds = {"/a": "dir", "/b": "dir", "/c": "dir", "/d.sock": "file"}
    box = Sandbox(write=("/c",), read=("/b",), hide=("/a",), reach=("/d.sock",))
    order = [m for m in mounts(box, "/c", kinds) if m.path != "/tmp"]
    assert [m.kind for m in order] == [HIDE_DIR, READ, WRITE, REACH]
    # the same folder both hidden and named writable: the config's word wins (mounted later)
    both = mounts(Sandbox(hide=("/c",)), "/c", kinds)
    assert both.index(Mount(WRITE, "/c")) > both.index(Mount(HIDE_DIR, "/c"))


def test_the_socket_is_bound_after_the_hidden_folder_it_lies_in():
    kinds = {"/w": "dir", "/data": "dir", "/data/mcp.sock": "file", "/tmp/sk-mcp/mcp.sock": "file"}
    box = Sandbox(hide=("/data",)).reaching("/data/mcp.sock", "/tmp/sk-mcp/mcp.sock")
    order = mounts(box, "/w", kinds)
    assert order.index(Mount(REACH, "/data/mcp.sock")) > order.index(Mount(HIDE_DIR, "/data"))
    assert order.index(Mount(REACH, "/tmp/sk-mcp/mcp.sock")) > order.index(Mount(HIDE_DIR, "/tmp"))
    assert box.reaching("/data/mcp.sock").reach == box.reach  # once


def test_kept_paths_are_bound_only_where_something_hides_them():
    kinds = {"/w": "dir", "/tmp/ci/.venv": "dir", "/usr": "dir", "/h": "dir", "/h/me/venv": "dir"}
    box = Sandbox(hide=("/h",), keep=("/tmp/ci/.venv", "/usr", "/h/me/venv"))
    kept = [m.path for m in mounts(box, "/w", kinds) if m.kind == READ]
    assert sorted(kept) == ["/h/me/venv", "/tmp/ci/.venv"]


def test_every_writable_folder_above_a_hidden_or_read_only_path_is_pinned():
    """docs/sandbox.md "Nothing writable holds the bridge": `mv ~/.config ~/.config.moved` would
    take the hidden ~/.config/sidekicks along; a mount point cannot be renamed, so ~/.config is
    bound onto itself (shallow first, before what lies in it)."""
    kinds = {
        "/h": "dir",
        "/h/.config": "dir",
        "/h/.config/sidekicks": "dir",
        "/h/.bashrc": "file",
        "/h/sk": "dir",
        "/h/sk/.venv": "dir",
        "/h/a": "dir",
        "/h/a/b": "dir",
        "/h/a/b/id": "file",
    }
    box = Sandbox(read=("/h/.bashrc", "/h/sk", "/h/sk/.venv"), hide=("/h/.config/sidekicks", "/h/a/b/id"))
    order = [m for m in mounts(box, "/h", kinds) if m.path != "/tmp"]
    assert order == [
        Mount(WRITE, "/h"),
        Mount(READ, "/h/.bashrc"),
        Mount(READ, "/h/sk"),
        Mount(PIN, "/h/.config"),
        Mount(PIN, "/h/a"),
        Mount(HIDE_DIR, "/h/.config/sidekicks"),
        Mount(READ, "/h/sk/.venv"),  # in a read-only folder: nothing to pin
        Mount(PIN, "/h/a/b"),
        Mount(HIDE_FILE, "/h/a/b/id"),
    ]
    assert ("--bind", "/h/.config", "/h/.config") in pairs(argv(box, ["a"], "/h", kinds))


def test_nothing_is_pinned_where_nothing_is_writable_or_hidden_already():
    kinds = {"/r": "dir", "/r/x": "dir", "/r/x/y": "file", "/d": "dir", "/d/e": "dir", "/d/e/f": "dir", "/w": "dir"}
    box = Sandbox(read=("/r",), hide=("/r/x/y", "/d", "/d/e/f"))
    assert [m for m in mounts(box, "/w", kinds) if m.kind == PIN] == []


def test_root_is_never_made_writable_and_missing_paths_are_left_out():
    options = pairs(argv(Sandbox(write=("/", "/nowhere")), ["a"], "/", {"/": "dir"}))
    assert not any(o[0] == "--bind" for o in options)


def test_the_environment_is_the_config_s_plus_four_of_the_bridge_s():
    bridge = {
        "PATH": "/usr/bin",
        "HOME": "/home/me",
        "LANG": "C.UTF-8",
        "TERM": "xterm",
        "AWS_SECRET_ACCESS_KEY": "x",
        "SIDEKICKS_MCP_SECRET": "y",
    }
    assert environment({"API_KEY": "k", "PATH": "/opt/bin"}, bridge) == {
        "PATH": "/opt/bin",
        "HOME": "/home/me",
        "LANG": "C.UTF-8",
        "TERM": "xterm",
        "API_KEY": "k",
    }
    assert set(environment({}, {"PATH": "/bin"})) == {"PATH"}
    assert ENV_KEPT == ("PATH", "HOME", "LANG", "TERM")


def test_a_resolver_on_the_host_s_loopback_is_replaced_by_slirp_s():
    stub = "# systemd-resolved\nnameserver 127.0.0.53\noptions edns0 trust-ad\nsearch lan\n"
    assert resolver(stub) == "nameserver 10.0.2.3\noptions edns0 trust-ad\nsearch lan\n"
    assert resolver("nameserver ::1\n") == "nameserver 10.0.2.3\n"
    assert resolver("nameserver 127.0.0.1\nnameserver 192.0.2.53\n") is None  # one it reaches: kept
    line = argv(Sandbox(), ["a"], "/w", {"/w": "dir"}, resolv=(5, "/run/systemd/resolve/stub-resolv.conf"))
    assert line[-7:-4] == ["--ro-bind-data", "5", "/run/systemd/resolve/stub-resolv.conf"]  # after every mount


# ---- the same command lines, run by real bubblewrap ------------------------------------------

bwrap = shutil.which("bwrap") or "bwrap"  # ./sidekicks test installs it


def test_bubblewrap_runs_the_probe():
    assert subprocess.run(probe_argv(True, bwrap), timeout=60).returncode == 0
    assert subprocess.run(probe_argv(False, bwrap), timeout=60).returncode == 0


def test_real_bubblewrap_reaches_what_the_order_says(tmp_path):
    top = tmp_path / "t"
    work, data, cfg = top / "cfg" / "work", top / "cfg" / "work" / "data", top / "cfg"
    data.mkdir(parents=True)
    (cfg / "config.yaml").write_text("secret-config")
    (data / "store").write_text("secret-store")
    (top / "beside").write_text("visible")
    box = Sandbox(read=(str(top),), hide=(str(cfg), str(cfg / "config.yaml"), str(data)))
    paths = [str(p) for p in (top, cfg, work, data, cfg / "config.yaml")]
    kinds = {p: "dir" if os.path.isdir(p) else "file" for p in [*paths, "/tmp"]}
    script = (
        "import os;"
        "print(open('../../beside').read());"
        "print(os.path.exists('config.yaml'), os.listdir('data'), os.listdir('..'));"
        "open('mine', 'w').write('ok');"
        "print(os.getpid())"
    )
    done = subprocess.run(
        argv(box, ["python3", "-c", script], str(work), kinds, bwrap),
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"]},
    )
    assert done.returncode == 0, done.stderr
    beside, listing, pid = done.stdout.splitlines()
    assert beside == "visible"  # read: the folder around, read-only
    assert listing == "False [] ['work']"  # the hidden folder empty but for the work folder in it
    assert (work / "mine").read_text() == "ok"  # the working directory is written for real
    assert int(pid) < 10  # its own PID namespace
    denied = subprocess.run(
        argv(box, ["sh", "-c", f"echo x > {top}/outside"], str(work), kinds, bwrap),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert denied.returncode != 0 and not (top / "outside").exists()


# ---- acp.start_agent with a sandbox (acp/process.py) ----------------------------------------


async def test_an_agent_starts_in_its_sandbox(tmp_path):
    import sys

    from acp import AgentSpec, start_agent

    scripted = os.path.join(os.path.dirname(__file__), "..", "..", "agents", "scripted_agent.py")
    work = tmp_path / "work"
    spec = AgentSpec(
        name="boxed",
        command=[sys.executable, os.path.abspath(scripted)],
        cwd=str(work),
        sandbox=Sandbox(write=(str(work),), hide=(str(tmp_path / "data"),)),
    )
    work.mkdir()
    agent = await start_agent(spec)
    try:
        assert agent.protocol_version == 1  # initialize answered from inside bwrap
        from acp.process import _descendants

        with open(f"/proc/{agent.process.pid}/cmdline", "rb") as handle:  # the child: the supervisor
            assert handle.read().split(b"\0")[0] == b"/bin/sh"
        below = []
        for pid in _descendants(agent.process.pid):
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                below.append(os.path.basename(handle.read().split(b"\0")[0]))
        assert b"bwrap" in below  # and bwrap below it
    finally:
        await agent.stop()


async def test_without_bubblewrap_a_sandboxed_agent_does_not_start(tmp_path, monkeypatch):
    import sys

    import pytest

    from acp import AgentSpec, AgentStartError, process, start_agent

    monkeypatch.setattr(process, "_probed", {})
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap here
    spec = AgentSpec(name="boxed", command=[sys.executable, "-c", "pass"], sandbox=Sandbox())
    with pytest.raises(AgentStartError) as caught:
        await start_agent(spec)
    assert str(caught.value) == (
        "boxed: sandbox cannot run: bubblewrap is not installed: no bwrap on PATH; "
        "install bubblewrap (apt-get install bubblewrap) or set sandbox: off for this agent"
    )


async def test_stopping_a_sandboxed_agent_that_ignores_eof_and_sigterm_leaves_nothing(tmp_path):
    """The agent runs in a session of its own below bwrap, below the supervisor (acp/netns.py):
    stop() ends every process of the sandbox."""
    import asyncio
    import sys

    from acp.process import AgentProcess, _descendants

    work = tmp_path / "work"
    work.mkdir()
    started = work / "started"
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(started)!r}, 'w').close()\n"
        "while True:\n"
        "    time.sleep(1)\n"
    )
    process = AgentProcess("stubborn", [sys.executable, "-c", code], str(work), sandbox=Sandbox(write=(str(work),)))
    await process.start()
    for _ in range(600):
        if started.exists():
            break
        await asyncio.sleep(0.05)
    assert started.exists()
    inside = _descendants(process.pid)
    assert inside  # bwrap's init and the agent, below bwrap
    await process.stop(stdin_grace=0.2, term_grace=0.2)
    for _ in range(200):
        if not any(os.path.exists(f"/proc/{pid}") and _state(pid) != "Z" for pid in inside):
            break
        await asyncio.sleep(0.05)
    assert [pid for pid in inside if os.path.exists(f"/proc/{pid}") and _state(pid) != "Z"] == []


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return "gone"
