"""Processed appservice transactions (`sk_txn`): a homeserver sends a transaction again when it
got no answer, so each handled one leaves its key; keys (and the records of turns over) older
than `keep_ms` are pruned now and then."""

from __future__ import annotations

from .core import Core, Part, operation
from .ids import now_ms
from .turn_states import TERMINAL

# Processed transaction keys are kept this long, then pruned: a homeserver retries a transaction
# it got no answer for within minutes (Synapse backs off to 512 s at most), so days are plenty.
TXN_KEEP_MS = 7 * 24 * 3600 * 1000
TXN_PRUNE_EVERY_MS = 3600 * 1000  # mark_txn prunes at most this often


class Transactions(Part):
    def __init__(self, core: Core) -> None:
        super().__init__(core)
        self.keep_ms = TXN_KEEP_MS  # benchmarks and tests shorten these
        self.prune_every_ms = TXN_PRUNE_EVERY_MS
        self._next_prune = 0  # ms: the first mark_txn prunes (keys left by the last run)

    @operation
    def txn_seen(self, txn_id: str) -> bool:
        return bool(self.core.queries.txn_seen.rows(id=txn_id))

    @operation
    def mark_txn(self, txn_id: str) -> None:
        """Record a key as handled; every `prune_every_ms`, prune the old ones (whichever write
        records keys: the dispatcher's, or an owner message's taken with its turns)."""
        now = now_ms()
        self.core.queries.mark_txn.run(id=txn_id, seen=now)
        if now >= self._next_prune:
            self.prune_before(now)

    @operation
    def prune_txns(self) -> int:
        """Forget the transaction keys older than `keep_ms`; how many went."""
        return self.prune_before(now_ms())

    @operation
    def prune_before(self, now: int) -> int:
        """Transaction keys, and the records of turns over, older than `keep_ms` at `now`."""
        self._next_prune = now + self.prune_every_ms
        T = self.core.models.Turn
        T.delete().where(T.state.in_(TERMINAL) & (T.updated < now - self.keep_ms)).execute()
        return self.core.queries.prune_txns.run(before=now - self.keep_ms).rowcount
