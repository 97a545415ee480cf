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

from .core import Part, operation
from .ids import new_id, now_ms
from .schema import next_number, select

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


def _record(row: tuple) -> WorktreeRecord:
    values = dict(zip(COLUMNS, row))
    return WorktreeRecord(**{**values, "number": int(values["number"]), "created": int(values["created"] or 0)})


class Places(Part):
    @operation
    def work_dir(self, channel_id: str, agent: str) -> str | None:
        """The folder `!cwd` chose for `agent` in the channel, or None (its configured cwd)."""
        W = self.core.models.WorkDir
        row = W.select(W.path).where((W.channel_id == channel_id) & (W.agent == agent)).tuples().first()
        return row[0] if row else None

    @operation
    def set_work_dir(self, channel_id: str, agent: str, path: str | None) -> None:
        """Choose (None: forget) the member's folder in the channel."""
        W = self.core.models.WorkDir
        with self.core.db.atomic():
            W.delete().where((W.channel_id == channel_id) & (W.agent == agent)).execute()
            if path is not None:
                W.insert(channel_id=channel_id, agent=agent, path=path, updated=now_ms()).execute()

    def _select(self, where):
        return select(self.core.models.Worktree, COLUMNS).where(where)

    @operation
    def worktree(self, channel_id: str, conversation: str, repo: str) -> WorktreeRecord | None:
        """The thread's worktree of `repo`, if one was made."""
        T = self.core.models.Worktree
        where = (T.channel_id == channel_id) & (T.conversation == conversation) & (T.repo == repo)
        row = self._select(where).tuples().first()
        return _record(row) if row else None

    @operation
    def add_worktree(self, channel_id: str, conversation: str, repo: str, branch: str, path: str) -> WorktreeRecord:
        """Keep a worktree just made (its number the channel's next); the thread's one of that
        repository if it has one already."""
        T = self.core.models.Worktree
        with self.core.db.atomic():
            found = self.worktree(channel_id, conversation, repo)
            if found is not None:
                return found
            T.insert(
                id=new_id(),
                channel_id=channel_id,
                conversation=conversation,
                repo=repo,
                number=next_number(T, channel_id),
                branch=branch,
                path=path,
                created=now_ms(),
            ).execute()
            made = self.worktree(channel_id, conversation, repo)
            assert made is not None  # written just now, in this transaction
            return made

    @operation
    def worktrees(self, channel_id: str, conversation: str | None = None) -> list[WorktreeRecord]:
        """The channel's worktrees (of one thread, if given), by number."""
        T = self.core.models.Worktree
        where = T.channel_id == channel_id
        if conversation is not None:
            where &= T.conversation == conversation
        return [_record(row) for row in self._select(where).order_by(T.number).tuples()]

    @operation
    def forget_worktree(self, channel_id: str, number: int) -> WorktreeRecord | None:
        """Forget worktree `number` of the channel (once removed from disk): the record, or None."""
        T = self.core.models.Worktree
        with self.core.db.atomic():
            row = self._select((T.channel_id == channel_id) & (T.number == number)).tuples().first()
            if row is None:
                return None
            T.delete().where(T.id == row[0]).execute()
            return _record(row)
