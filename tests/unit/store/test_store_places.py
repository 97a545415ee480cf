"""Where agents work, in the store (store/places.py): a member's `!cwd` folder per channel, the
threads' worktrees numbered per channel, one per thread and repository; both go with the channel."""


def test_a_members_folder_is_kept_per_channel_and_can_be_forgotten(store, channel):
    other = store.create_channel("!other:hs", "other")
    assert store.places.work_dir(channel.id, "alice") is None
    store.places.set_work_dir(channel.id, "alice", "/code/a")
    store.places.set_work_dir(channel.id, "alice", "/code/b")  # chosen again: the newer one
    assert store.places.work_dir(channel.id, "alice") == "/code/b"
    assert store.places.work_dir(other.id, "alice") is None and store.places.work_dir(channel.id, "bob") is None
    store.places.set_work_dir(channel.id, "alice", None)
    assert store.places.work_dir(channel.id, "alice") is None


def test_worktrees_are_one_per_thread_and_repository_numbered_per_channel(store, channel):
    other = store.create_channel("!other:hs", "other")
    one = store.places.add_worktree(channel.id, "$t1", "/repo", "sidekicks/a-1", "/repo.worktrees/a-1")
    again = store.places.add_worktree(channel.id, "$t1", "/repo", "sidekicks/a-2", "/repo.worktrees/a-2")
    two = store.places.add_worktree(channel.id, "$t2", "/repo", "sidekicks/b-1", "/repo.worktrees/b-1")
    there = store.places.add_worktree(other.id, "$t3", "/repo", "sidekicks/c-1", "/repo.worktrees/c-1")
    assert again == one and (one.number, two.number, there.number) == (1, 2, 1)
    assert store.places.worktree(channel.id, "$t1", "/repo").branch == "sidekicks/a-1"
    assert store.places.worktree(channel.id, "$t1", "/other-repo") is None
    assert [w.number for w in store.places.worktrees(channel.id)] == [1, 2]
    assert [w.conversation for w in store.places.worktrees(channel.id, "$t2")] == ["$t2"]
    assert store.places.forget_worktree(channel.id, 1) == one
    assert store.places.forget_worktree(channel.id, 1) is None
    assert [w.number for w in store.places.worktrees(channel.id)] == [2]
    # a number is never given again in the channel while a later one is kept
    assert store.places.add_worktree(channel.id, "$t4", "/repo", "sidekicks/d-1", "/d").number == 3


def test_a_deleted_channel_takes_its_places_with_it(store, channel):
    store.places.set_work_dir(channel.id, "alice", "/code")
    store.places.add_worktree(channel.id, "$t1", "/repo", "sidekicks/a-1", "/repo.worktrees/a-1")
    store.delete_channel(channel.id)
    assert store.places.work_dir(channel.id, "alice") is None and store.places.worktrees(channel.id) == []
