"""The MCP tools act in the caller's conversation (bridge/mcp/actions.py,
docs/architecture.md "Conversations and threads", "MCP tools and schedules"): `history` reads that
conversation's messages (a thread: its root and its own), `send_file` posts into it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fake_intent import FakeIntent

from bridge.mcp import actions
from bridge.mcp.actions import Means, Refused, Scope
from store import Store
from store.offloop import OffLoop


async def test_history_is_the_callers_conversation():
    store = Store.open(":memory:")
    try:
        channel = store.create_channel("!r:hs", "general")
        store.add_message(channel.id, "@me:hs", "user", "the root", ["$root"])
        store.add_message(channel.id, "@me:hs", "user", "in the thread", ["$t"], conversation="$root")
        store.add_message(channel.id, "@me:hs", "user", "main later", ["$m"])
        means = Means(OffLoop(store), SimpleNamespace(), SimpleNamespace(), lambda: None)
        main = await actions.history(means, Scope(channel.id, "!r:hs", "", "alice"), 10, None)
        thread = await actions.history(means, Scope(channel.id, "!r:hs", "$root", "alice"), 10, None)
        assert "main later" in main and "in the thread" not in main
        assert "the root" in thread and "in the thread" in thread and "main later" not in thread
    finally:
        store.close()


async def test_send_file_posts_from_the_directory_the_session_works_in(tmp_path):
    """A thread's session in its own worktree posts the worktree's files (a relative path is
    read there), not the main checkout's it does not work in (docs/SECURITY.md "What an agent cannot do")."""
    work, tree = tmp_path / "repo", tmp_path / "repo.worktrees" / "t1"
    work.mkdir()
    tree.mkdir(parents=True)
    (work / "main.txt").write_text("main")
    (tree / "mine.txt").write_text("mine")
    store = Store.open(":memory:")
    try:
        channel = store.create_channel("!r:hs", "general")
        store.add_member(channel.id, "alice")
        store.set_session(channel.id, "alice", "s-thread", fresh=False, cwd=str(tree), conversation="$root")
        intent = FakeIntent()
        config = SimpleNamespace(
            agents={"alice": SimpleNamespace(cwd=str(work))},
            attachment_bytes=1 << 20,
            path=tmp_path / "cfg" / "config.yaml",
            data_dir=tmp_path / "data",
            registration_path=tmp_path / "reg" / "registration.yaml",
            homeserver_config=None,
        )

        async def puppet(agent):
            return SimpleNamespace(intent=intent)

        means = Means(OffLoop(store), config, SimpleNamespace(puppet=puppet), lambda: None)
        thread = Scope(channel.id, "!r:hs", "$root", "alice")
        assert "Posted mine.txt" in await actions.send_file(means, thread, "mine.txt", None)
        assert "Posted mine.txt" in await actions.send_file(means, thread, str(tree / "mine.txt"), None)
        with pytest.raises(Refused, match="outside the agent's working directory"):
            await actions.send_file(means, thread, str(work / "main.txt"), None)
        assert [c["body"] for c in intent.contents()] == ["mine.txt", "mine.txt"]
        assert all(c["m.relates_to"]["event_id"] == "$root" for c in intent.contents())
        # the main timeline's session, none stored: the configured cwd
        main = Scope(channel.id, "!r:hs", "", "alice")
        assert "Posted main.txt" in await actions.send_file(means, main, "main.txt", None)
        with pytest.raises(Refused, match="outside"):
            await actions.send_file(means, main, str(tree / "mine.txt"), None)
    finally:
        store.close()
