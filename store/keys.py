"""Every key the bridge keeps in the store's key-value table (`sk_value`: `get_value`,
`set_value`), named once, here. A key is part of the schema: a store written by an earlier
version is read with the same names, so a key is never renamed without a migration step.

Also the key a handled event leaves beside the transaction ids (`txn_seen` / `mark_txn`).
"""

from __future__ import annotations

# ---- sk_value ---------------------------------------------------------------------------------

SPACE = "space"  # the room id of the "Sidekicks" space (bridge/matrix/space.py)
TRANSACTION_ORDER = "appservice/transaction-order"  # the last transaction number handled (appservice.py)
OUTAGE_PROBE = "outage:probe"  # written to learn whether the store takes writes again (bridge/outage.py)


def bot_dm(owner: str) -> str:
    """The room id of `owner`'s direct chat with the bridge bot (channels/commands/commands.py)."""
    return f"bot_dm:{owner}"


def welcomed(owner: str) -> str:
    """Set once `owner` was welcomed: the bot's DM and a direct channel with the first agent made
    at `sidekicks up` (channels/commands/commands.py `welcome`), never again."""
    return f"welcomed:{owner}"


def bot_room(room_id: str) -> str:
    """The owner whose direct chat with the bot `room_id` is (channels/commands/commands.py)."""
    return f"bot_room:{room_id}"


def avatar(user_id: str) -> str:
    """The mxc URI of the avatar uploaded for the bot or a puppet `user_id` (bridge/matrix/avatars.py)."""
    return f"avatar:{user_id}"


def avatar_source(user_id: str) -> str:
    """What `avatar(user_id)` was made from: the agent's `avatar:` URL or file, "" for a generated
    one (absent in stores from before: generated) (bridge/matrix/avatars.py)."""
    return f"avatar_source:{user_id}"


def threads(channel_id: str) -> str:
    """ "on" when channel `channel_id` opens a thread under each top-level message agents answer
    (`!threads on`, channels/commands/commands.py); absent (the default) when it does not."""
    return f"threads:{channel_id}"


def handoffs(channel_id: str) -> str:
    """ "off" when the agents of channel `channel_id` may not hand work to each other
    (`!handoffs off`, channels/commands/commands.py); absent (the default) when they may."""
    return f"handoffs:{channel_id}"


def voice(channel_id: str) -> str:
    """ "on" when channel `channel_id` also reads each final answer aloud as a voice note
    (`!voice on`, bridge/voice/spoken.py); absent (the default) when it does not."""
    return f"voice:{channel_id}"


def approve(channel_id: str) -> str:
    """ "any-owner" when any owner answers the permission prompts and questions of channel
    `channel_id` (`!approve`, channels/rules/approvals.py); absent (the default): the requester."""
    return f"approve:{channel_id}"


def budget(channel_id: str) -> str:
    """Channel `channel_id`'s budget, `{"cost": 5.0, "per": "day"}` (`!budget channel`,
    channels/commands/budgets.py); absent (the default): none."""
    return f"budget:{channel_id}"


def command_digest(room_id: str, agent: str) -> str:
    """The digest of the MSC4391 command descriptions `agent`'s puppet last published in
    `room_id` (bridge/matrix/msc4391.py)."""
    return f"msc4391:{room_id}:{agent}"


# ---- beside the transaction ids (sk_txn) --------------------------------------------------------


def handled_event(event_id: str) -> str:
    """An event the dispatcher handled (bridge/matrix/dispatch.py): never handled twice."""
    return f"ev:{event_id}"


# ---- only read by a migration step: the data moved to a table of its own ------------------------

# (step 8, store/migrations.py: now `sk_e2ee_pending` and `sk_e2ee_room`, store/e2ee.py)
E2EE_PENDING = "e2ee:pending"  # encrypted events waiting for their room key (a JSON list of events)
E2EE_ROOMS = "e2ee:rooms"  # the rooms known to be encrypted (a JSON list of room ids)
