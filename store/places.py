"""Where agents work, per channel (bridge/coding/places.py reads it for every new session):

* a member's working directory chosen with `!cwd` (`sk_work_dir`, a row per channel and agent;
  none: the configured `cwd`);
* the git worktrees the bridge made for threads (`sk_worktree`, a row per thread and
  repository), numbered per channel as `!worktrees` shows them, so that a restart finds each
  thread's worktree again and `!worktrees remove N` names one without anything remembered.

Added by migration step 11 (store/migrations.py). Both go with the channel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .ids import new_id, now_ms

if TYPE_CHECKING:
    from .store import Store

COLUMNS = ("id", "channel_id", "conversation", "repo", "number", "branch", "path", "created")


@dataclass(frozen=True)
class WorktreeRecord:
    id: str
    channel_id: str
    conversation: str  # the thread's root event id
    repo: str  # the top of the checkout it was made from
    number: int  # per channel: what `!worktrees` shows and `!worktrees remove N` takes
    branch: str
    path: str
    created: int  # ms


class Places:
    def __init__(self, store: Store) -> None:
        self._store = store

    def work_dir(self, channel_id: str, agent: str) -> str | None:
        """The folder `!cwd` chose for `agent` in the channel, or None (its configured cwd)."""
        return self._store._run(_work_dir, channel_id, agent)

    def set_work_dir(self, channel_id: str, agent: str, path: str | None) -> None:
        """Choose (None: forget) the member's folder in the channel."""
        self._store._run(_set_work_dir, channel_id, agent, path)

    def worktree(self, channel_id: str, conversation: str, repo: str) -> WorktreeRecord | None:
        """The thread's worktree of `repo`, if one was made."""
        return self._store._run(_worktree, channel_id, conversation, repo)

    def add_worktree(self, channel_id: str, conversation: str, repo: str, branch: str, path: str) -> WorktreeRecord:
        """Keep a worktree just made (its number the channel's next); the thread's one of that
        repository if it has one already."""
        return self._store._run(_add_worktree, channel_id, conversation, repo, branch, path)

    def worktrees(self, channel_id: str, conversation: str | None = None) -> list[WorktreeRecord]:
        """The channel's worktrees (of one thread, if given), by number."""
        return self._store._run(_worktrees, channel_id, conversation)

    def forget_worktree(self, channel_id: str, number: int) -> WorktreeRecord | None:
        """Forget worktree `number` of the channel (once removed from disk): the record, or None."""
        return self._store._run(_forget_worktree, channel_id, number)


# --- the operations (run by Store._run, under its lock) ----------------------------------------


def _work_dir(store: Store, channel_id: str, agent: str) -> str | None:
    W = store._m.WorkDir
    row = W.select(W.path).where((W.channel_id == channel_id) & (W.agent == agent)).tuples().first()
    return row[0] if row else None


def _set_work_dir(store: Store, channel_id: str, agent: str, path: str | None) -> None:
    W = store._m.WorkDir
    with store._db.atomic():
        W.delete().where((W.channel_id == channel_id) & (W.agent == agent)).execute()
        if path is not None:
            W.insert(channel_id=channel_id, agent=agent, path=path, updated=now_ms()).execute()


def _record(row: tuple) -> WorktreeRecord:
    values = dict(zip(COLUMNS, row))
    return WorktreeRecord(**{**values, "number": int(values["number"]), "created": int(values["created"] or 0)})


def _select(store: Store):
    T = store._m.Worktree
    return T.select(*(getattr(T, c) for c in COLUMNS))


def _worktree(store: Store, channel_id: str, conversation: str, repo: str) -> WorktreeRecord | None:
    T = store._m.Worktree
    row = (
        _select(store)
        .where((T.channel_id == channel_id) & (T.conversation == conversation) & (T.repo == repo))
        .tuples()
        .first()
    )
    return _record(row) if row else None


def _add_worktree(
    store: Store, channel_id: str, conversation: str, repo: str, branch: str, path: str
) -> WorktreeRecord:
    T = store._m.Worktree
    with store._db.atomic():
        found = _worktree(store, channel_id, conversation, repo)
        if found is not None:
            return found
        row = T.select(T.number).where(T.channel_id == channel_id).order_by(T.number.desc()).limit(1).tuples().first()
        T.insert(
            id=new_id(),
            channel_id=channel_id,
            conversation=conversation,
            repo=repo,
            number=(int(row[0]) if row else 0) + 1,
            branch=branch,
            path=path,
            created=now_ms(),
        ).execute()
        return _worktree(store, channel_id, conversation, repo)


def _worktrees(store: Store, channel_id: str, conversation: str | None) -> list[WorktreeRecord]:
    T = store._m.Worktree
    where = T.channel_id == channel_id
    if conversation is not None:
        where &= T.conversation == conversation
    return [_record(row) for row in _select(store).where(where).order_by(T.number).tuples()]


def _forget_worktree(store: Store, channel_id: str, number: int) -> WorktreeRecord | None:
    T = store._m.Worktree
    with store._db.atomic():
        row = _select(store).where((T.channel_id == channel_id) & (T.number == number)).tuples().first()
        if row is None:
            return None
        T.delete().where(T.id == row[0]).execute()
        return _record(row)
