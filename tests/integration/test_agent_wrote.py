"""The bridge runs nothing an agent wrote, and an agent's reach ends with its reason
(docs/SECURITY.md), end to end: a real Synapse, the real bridge, the owner's matrix-nio client,
real agent processes (tests/agents/mcp_agent.py with the official MCP client, the scripted
agent), real git.

- A project holding `config.py`, `bridge/` and `store.py` (each would write a marker when
  imported): the `matrix` MCP server started from there, with PYTHONPATH pointing there, works
  and imports none of them.
- An agent kicked from the room: its next MCP call, made on its own after the kick, is refused.
- A hard link in the working directory to a file outside it: `send_file` refuses it.
- A checkout with a planted post-checkout hook, a `core.fsmonitor` command and a smudge/clean
  filter named by its `.gitattributes`: a thread's worktree (made at the thread's first turn)
  and `!worktrees` run none of them; a worktree whose `.git` file was rewritten to point
  elsewhere is still seen as it is.
- A `!cwd` folder swapped for a link out of the roots after `!cwd` took it: the session opens
  in the configured cwd, and the owner is told in one line.
"""

from __future__ import annotations

import os
from pathlib import Path

import nio
from bridge_harness import agent, wait_until
from git_traps import plant, plant_conditional
from helpers import ALICE, answered, in_thread, received, say
from matrix_helpers import events_in, sync_until
from test_channels import group
from test_matrix_mcp import ask, channel_with_alice, mcp_agent
from test_worktrees import git, make_repo, new_sessions, notice


def tool_results(log: Path) -> list[dict]:
    return [m for m in received(log) if "tool" in m and "text" in m]


async def test_a_projects_config_py_and_bridge_folder_never_run_and_the_tools_work(bridge_factory, tmp_path, owner):
    work, marker = tmp_path / "project", tmp_path / "imported"
    (work / "bridge").mkdir(parents=True)
    for name in ("config.py", "bridge/__init__.py", "store.py", "mcp.py"):
        (work / name).write_text(f"open({str(marker)!r} + '-' + {name!r}.replace('/', '-'), 'w').close()\n")
    log = tmp_path / "alice.log"
    # the agent starts the server in the session's folder, with PYTHONPATH pointing there too
    await bridge_factory({"alice": mcp_agent(log, work, "--in-session-cwd", f"--server-env=PYTHONPATH={work}")})
    room = await channel_with_alice(owner, "project")
    await ask(owner, room, "the build is green", "echo:")
    found = await ask(owner, room, '[[tool:history {"limit": 5}]]', "history")
    assert found.startswith("history: ") and "the build is green" in found, found
    assert [m["error"] for m in tool_results(log)] == [False]
    assert sorted(p.name for p in tmp_path.glob("imported*")) == []
    # isolated: neither its working directory nor PYTHONPATH is read
    (entry,) = next(m for m in received(log) if m.get("method") == "session/new")["params"]["mcpServers"]
    assert entry["args"][0] == "-I"


async def test_a_kicked_agents_mcp_call_is_refused(bridge_factory, tmp_path, owner):
    work, log, trigger = tmp_path / "work", tmp_path / "alice.log", tmp_path / "go"
    work.mkdir()
    running = await bridge_factory({"alice": mcp_agent(log, work)})
    room = await channel_with_alice(owner, "kick")
    assert (await ask(owner, room, "[[tool:schedules]]", "schedules")).startswith(
        "schedules: You have nothing scheduled"
    )
    # the agent keeps its session's server, and calls on its own once `trigger` exists
    await ask(owner, room, f"[[tool-when:{trigger} history {{}}]]", "waiting for")
    channel = running.store.channel_by_room(room)
    assert isinstance(await owner.room_kick(room, ALICE, "enough"), nio.RoomKickResponse)
    await wait_until(lambda: running.store.member(channel.id, "alice") is None, what="alice is no longer a member")
    trigger.touch()
    await wait_until(lambda: len(tool_results(log)) == 2, what="alice's call after the kick")
    late = tool_results(log)[-1]
    assert late["tool"] == "history" and late["error"] is True
    assert "no longer a member of this channel" in late["text"], late


async def test_send_file_refuses_a_hard_link_to_a_file_outside(bridge_factory, tmp_path, owner):
    work, log = tmp_path / "work", tmp_path / "alice.log"
    work.mkdir()
    secret = tmp_path / "registration.yaml"
    secret.write_text("as_token: not for the room\n")
    os.link(secret, work / "notes.txt")
    (work / "plain.txt").write_text("for the room\n")
    await bridge_factory({"alice": mcp_agent(log, work)})
    room = await channel_with_alice(owner, "links")
    refused = await ask(owner, room, '[[tool:send_file {"path": "notes.txt"}]]', "send_file")
    assert refused.startswith("send_file error: notes.txt was not posted: it has 2 hard links"), refused
    posted = await ask(owner, room, '[[tool:send_file {"path": "plain.txt"}]]', "send_file")
    assert posted.startswith("send_file: Posted plain.txt"), posted
    files = [
        e["content"]["body"]
        for e in events_in(owner, room)
        if e.get("type") == "m.room.message" and e["content"].get("msgtype") == "m.file"
    ]
    assert files == ["plain.txt"]


async def test_a_threads_worktree_and_worktrees_run_nothing_the_checkout_names(bridge_factory, tmp_path, owner):
    repo, marker, log = make_repo(tmp_path / "app"), tmp_path / "ran", tmp_path / "alice.log"
    plant(repo, marker)
    await bridge_factory({"alice": agent("--log", str(log), title="Alice", cwd=str(repo), worktrees="on")})
    room_id = await group(owner, ALICE)
    root = await say(owner, room_id, "@alice Fix the login bug")
    await answered(owner, room_id, ALICE, 1)
    await say(owner, room_id, "@alice [[write:one.txt]]", **in_thread(root, root))
    made = await notice(owner, room_id, "Alice works in this thread on branch")
    tree = Path(made["content"]["body"].split("in its own worktree: ", 1)[1])
    await wait_until(lambda: (tree / "one.txt").is_file(), what="one.txt written in the thread's worktree")
    assert (tree / "README").read_text() == "the project\n"  # checked out without the smudge filter
    await say(owner, room_id, "!worktrees")
    listing = (await notice(owner, room_id, "Worktrees in #general:"))["content"]["body"]
    assert listing.splitlines()[1].endswith(f"— {tree} — dirty: 1 uncommitted changes"), listing
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == []

    # the worktree's .git file rewritten: the bridge names its git folder from the checkout
    (tree / ".git").write_text(f"gitdir: {tmp_path / 'nowhere'}\n")
    (tree / "README").write_text("edited\n")  # hashed by status: the clean filter, were it on
    await say(owner, room_id, "!worktrees")
    await sync_until(
        owner,
        lambda: (
            sum(
                "Worktrees in #general:" in e["content"].get("body", "")
                for e in events_in(owner, room_id)
                if e.get("type") == "m.room.message"
            )
            == 2
        ),
    )
    second = [
        e["content"]["body"]
        for e in events_in(owner, room_id)
        if e.get("type") == "m.room.message" and "Worktrees in #general:" in e["content"].get("body", "")
    ][-1]
    assert second.splitlines()[1].endswith(f"— {tree} — dirty: 2 uncommitted changes"), second  # followed: "missing"
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == []
    # the test can fail: git asked as usual in that checkout runs them
    git(repo, "status", "--porcelain")
    assert (tmp_path / "ran-fsmonitor").exists()


async def test_a_filter_under_a_conditional_include_never_runs_for_a_thread(bridge_factory, tmp_path, owner):
    """`[includeIf "gitdir:**/worktrees/**"]` naming a smudge filter the committed
    .gitattributes applies: the thread gets no worktree, its turn says why in one line, the
    filter never runs (docs/sandbox.md "Git")."""
    repo, marker, log = make_repo(tmp_path / "app"), tmp_path / "ran", tmp_path / "alice.log"
    plant_conditional(repo, marker)
    await bridge_factory({"alice": agent("--log", str(log), title="Alice", cwd=str(repo), worktrees="on")})
    room_id = await group(owner, ALICE)
    root = await say(owner, room_id, "@alice Fix the login bug")
    await answered(owner, room_id, ALICE, 1)
    await say(owner, room_id, "@alice [[write:one.txt]]", **in_thread(root, root))

    def refused() -> bool:
        return any(
            "conditional include" in e["content"].get("body", "")
            for e in events_in(owner, room_id)
            if e.get("type") == "m.room.message"
        )

    await sync_until(owner, refused)
    assert not marker.with_name("ran-cond").exists()
    assert not (repo.parent / "app.worktrees").exists() or not any((repo.parent / "app.worktrees").iterdir())


async def test_a_cwd_folder_swapped_for_a_link_out_of_the_roots_is_not_where_the_session_opens(
    bridge_factory, tmp_path, owner
):
    repo, notes, outside = make_repo(tmp_path / "app"), tmp_path / "notes", tmp_path / "outside"
    (notes / "inner").mkdir(parents=True)
    outside.mkdir()
    log = tmp_path / "alice.log"
    await bridge_factory(
        {"alice": agent("--log", str(log), title="Alice", cwd=str(repo), roots=[str(repo), str(notes)])}
    )
    room_id = await group(owner, ALICE)
    await say(owner, room_id, f"!cwd {notes / 'inner'}")
    await notice(owner, room_id, f"Alice works in {notes / 'inner'} here from its next new session.")
    (notes / "inner").rmdir()
    (notes / "inner").symlink_to(outside)  # after !cwd checked it
    await say(owner, room_id, "@alice [[session-cwd]]")
    told = await notice(owner, room_id, "chosen with !cwd", "outside its roots")
    assert told["content"]["body"] == (
        f"Alice: the folder chosen with !cwd, {notes / 'inner'}, now leads to {outside}, outside its roots "
        f"(agents.<name>.roots): this session opens in {repo} instead."
    )
    assert (await answered(owner, room_id, ALICE, 1))[0]["final"] == str(repo)
    assert [s["cwd"] for s in new_sessions(log)] == [str(repo)]
