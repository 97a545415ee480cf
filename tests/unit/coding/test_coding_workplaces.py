"""Where each conversation's agent works (coding/workplaces.py), with a real store and a real
git repository, no homeserver: the configured cwd, a channel's `!cwd` inside the roots (refused
outside them, in one line), a thread's own worktree made once and found again after a restart,
and its removal only with `confirm` and only when clean."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from scene_helpers import PortalNotices, store_with_channel

from bridge.channels.base.parts import RoomParts
from bridge.coding.workplaces import WorkPlaces
from store.offloop import OffLoop


@pytest.fixture
async def scene(tmp_path, repo):
    (tmp_path / "notes").mkdir()
    store, channel = store_with_channel("!room:hs", "dev", ("alice", "bob"))
    agents = {
        "alice": SimpleNamespace(
            title="Alice", cwd=str(repo / "src"), roots=(str(repo), str(tmp_path / "notes")), worktrees=True
        ),
        "bob": SimpleNamespace(title="Bob", cwd=None, roots=(), worktrees=False),
    }
    notices = PortalNotices()
    portal = SimpleNamespace(channel=channel, room_id=channel.room_id, member_names=lambda: ["alice", "bob"])

    async def puppet(name):
        return name

    async def portal_for(room_id):
        return portal if room_id == channel.room_id else None

    rooms = RoomParts(
        SimpleNamespace(agents=agents),
        OffLoop(store),
        SimpleNamespace(portal_for=portal_for),
        SimpleNamespace(puppet=puppet),
        notices,
    )
    places = WorkPlaces(rooms, {"alice": "alice", "bob": "bob"})
    yield SimpleNamespace(
        store=store,
        channel=channel,
        portal=portal,
        places=places,
        notices=notices,
        repo=repo,
        tmp=tmp_path,
        rooms=rooms,
    )
    await places.close()
    store.close()


async def test_the_main_timeline_works_in_the_configured_cwd_with_the_other_roots_beside(scene):
    place = await scene.places.where(scene.portal, "alice")
    assert place.cwd == str(scene.repo / "src") and place.additional == (str(scene.tmp / "notes"),)
    assert (await scene.places.where(scene.portal, "bob", "$thread")).cwd is None  # none configured


async def test_cwd_moves_an_agent_inside_its_roots_and_refuses_elsewhere_in_one_line(scene):
    places, portal, said = scene.places, scene.portal, scene.notices.said
    await places.command(portal, "cwd", ())
    assert said[-1][0].splitlines() == [
        f"Alice: {scene.repo / 'src'} (as configured); may work in {scene.repo}, {scene.tmp / 'notes'}"
    ]
    await places.command(portal, "cwd", ("/etc",))
    assert said[-1][0] == (
        f"Alice may work only in {scene.repo}, {scene.tmp / 'notes'} (agents.<name>.roots); /etc is not in them."
    )
    await places.command(portal, "cwd", ("alice", "../../notes"))  # relative to its current folder
    assert said[-1][0] == f"Alice works in {scene.tmp / 'notes'} here from its next new session."
    place = await places.where(portal, "alice")
    assert place.cwd == str(scene.tmp / "notes") and place.additional == (str(scene.repo),)
    # the config no longer allows it (roots changed): as configured again
    alice = scene.places.config.agents["alice"]
    scene.places.config.agents["alice"] = SimpleNamespace(**{**vars(alice), "roots": (str(scene.repo),)})
    assert (await places.where(portal, "alice")).cwd == str(scene.repo / "src")
    scene.places.config.agents["alice"] = alice
    await places.command(portal, "cwd", ("alice", "missing"))
    assert said[-1][0] == f"Alice: no folder {scene.tmp / 'notes' / 'missing'}."
    await places.command(portal, "cwd", ("bob", "/tmp"))  # bob has no roots: never moved
    assert said[-1][0].startswith("Bob has no folders to work in")
    assert scene.store.places.work_dir(scene.channel.id, "bob") is None


async def test_a_cwd_folder_swapped_for_a_link_out_of_the_roots_is_not_opened(scene):
    """`!cwd` took a folder inside the roots; it was then swapped for a link leading out of
    them: the next session opens in the configured cwd, and the owner is told in one line."""
    places, portal, said = scene.places, scene.portal, scene.notices.said
    inner, outside = scene.tmp / "notes" / "inner", scene.tmp / "outside"
    inner.mkdir()
    outside.mkdir()
    await places.command(portal, "cwd", ("alice", str(inner)))
    assert said[-1][0] == f"Alice works in {inner} here from its next new session."
    inner.rmdir()
    inner.symlink_to(outside)
    place = await places.where(portal, "alice", "$thread")
    assert place.cwd != str(outside) and not place.cwd.startswith(str(outside))
    assert place.cwd.startswith(str(scene.tmp / "app.worktrees"))  # the configured cwd's checkout, a worktree
    text, relates_to = next((t, r) for t, r in said if "!cwd" in t)
    assert "\n" not in text and f"now leads to {outside}" in text and relates_to["event_id"] == "$thread"
    said.clear()
    assert (await places.where(portal, "alice")).cwd == str(scene.repo / "src")
    assert len(said) == 1 and "outside its roots" in said[0][0]


async def test_each_thread_gets_its_own_worktree_once_found_again_after_a_restart(scene):
    store, channel = scene.store, scene.channel
    store.add_message(channel.id, "@me:hs", "user", "Fix the login bug", ["$t1"])
    one = await scene.places.where(scene.portal, "alice", "$t1")
    two = await scene.places.where(scene.portal, "alice", "$t2")
    assert one.cwd != two.cwd and one.cwd.endswith("/src") and os.path.isdir(one.cwd)
    assert os.path.dirname(os.path.dirname(one.cwd)) == str(scene.tmp / "app.worktrees")
    assert "fix-the-login-bug-" in one.cwd and one.additional == (str(scene.tmp / "notes"),)
    said = [text for text, relation in scene.notices.said]
    assert len(said) == 2 and said[0].startswith("🌿 Alice works in this thread on branch sidekicks/fix-the-login-bug-")
    assert scene.notices.said[0][1]["event_id"] == "$t1"  # said in the thread
    again = await scene.places.where(scene.portal, "alice", "$t1")
    assert again == one and len(scene.notices.said) == 2  # made once
    # a new bridge finds it in the store
    restarted = WorkPlaces(scene.rooms, {})
    assert await restarted.where(scene.portal, "alice", "$t1") == one
    # the main timeline stays in the checkout
    assert (await scene.places.where(scene.portal, "alice")).cwd == str(scene.repo / "src")


async def test_a_worktree_is_removed_only_with_confirm_and_only_when_clean(scene):
    places, portal, said = scene.places, scene.portal, scene.notices.said
    place = await places.where(portal, "alice", "$t1")
    tree = os.path.dirname(place.cwd)
    await places.command(portal, "worktrees", ())
    assert said[-1][0].splitlines()[1].endswith(f"— {tree} — clean")
    (scene.repo.parent / tree / "new.txt").write_text("x")
    await places.thread_deleted(portal.room_id, "$t1")  # the thread's root redacted
    assert said[-1][0].startswith("The deleted thread's worktree 1") and "uncommitted changes: it stays" in said[-1][0]
    await places.command(portal, "worktrees", ("remove", "1", "confirm"))
    assert "uncommitted changes: it stays" in said[-1][0] and os.path.isdir(tree)
    os.remove(os.path.join(tree, "new.txt"))
    await places.thread_deleted(portal.room_id, "$t1")
    assert said[-1][0].endswith("To remove the worktree (its branch stays), type: !worktrees remove 1 confirm")
    await places.command(portal, "worktrees", ("remove", "1"))  # no confirm: asked, kept
    assert said[-1][0].endswith("To do it, type: !worktrees remove 1 confirm") and os.path.isdir(tree)
    await places.command(portal, "worktrees", ("remove", "1", "confirm"))
    assert said[-1][0].startswith("Removed worktree 1") and not os.path.exists(tree)
    assert scene.store.places.worktrees(scene.channel.id) == []
    await places.command(portal, "worktrees", ("remove", "1", "confirm"))
    assert said[-1][0] == "There is no worktree 1 here (see !worktrees)."
    count = len(said)
    await places.thread_deleted(portal.room_id, "$unrelated")  # not a thread with worktrees: nothing said
    assert len(said) == count
