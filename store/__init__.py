"""Persistent state of the bridge: channels, members, finished messages.

Knows nothing of Matrix: room and event ids are opaque strings.
"""

from .errors import StoreClosed, StoreError, StoreLocked, StoreLockLost, StoreUnavailable, StoreUnwritable
from .ids import new_id
from .records import Channel, Member, Message, SessionRecord, TurnRecord
from .settings import MemberSettings
from .store import Store

__all__ = [
    "Channel",
    "Member",
    "MemberSettings",
    "Message",
    "SessionRecord",
    "Store",
    "StoreClosed",
    "StoreError",
    "StoreLocked",
    "StoreLockLost",
    "StoreUnavailable",
    "StoreUnwritable",
    "TurnRecord",
    "new_id",
]
