"""Conversations in a channel (docs/architecture.md "Conversations and threads"), without a
homeserver: who answers a thread message (its own last speaker), what a turn in a thread reads (its
root and its own messages), and each member's ACP session per conversation — with a real store,
through the portal's calls."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from fake_places import ConfiguredPlaces
from scene_helpers import store_with_channel

from acp import SessionCapabilities
from bridge.channels.turns import portal as portals
from bridge.channels.turns.context import UnseenMessage
from bridge.channels.turns.portal import Portal
from bridge.channels.turns.turns import context_reader, unseen_lines
from store.offloop import OffLoop
from store.turns import TAKEN, claimed_in

AGENTS = ("alice", "bob")


@pytest.fixture
async def scene():
    store, channel = store_with_channel("!room:hs", "general", AGENTS)
    opened: list[tuple[str, str, bool]] = []

    async def settings_opened(portal, agent_name, agent, session_id, new, conversation=""):
        opened.append((agent_name, session_id, new))

    config = SimpleNamespace(
        agents={a: SimpleNamespace(cwd=None, title=a.title()) for a in AGENTS}, agent_for_user_id=lambda u: None
    )
    parts = SimpleNamespace(
        db=OffLoop(store),
        config=config,
        aliases={a: a for a in AGENTS},
        run_id="run-1",
        mcp_servers=lambda portal, name, agent, conversation: [],
        settings=SimpleNamespace(opened=settings_opened),
        places=ConfiguredPlaces(config),
        recovered=asyncio.Event(),
        stopping=asyncio.Event(),
    )
    parts.recovered.set()
    portal = Portal(parts, channel, list(AGENTS))
    yield SimpleNamespace(store=store, channel=channel, portal=portal, opened=opened)
    store.close()


def say(store, channel, sender, text, event_id, conversation=""):
    role = "agent" if sender in AGENTS else "user"
    return store.add_message(channel.id, sender, role, text, [event_id], conversation=conversation)


async def route(portal, body, conversation=""):
    return [t.agent for t in (await portal.route(body, None, [], conversation)).answerers]


async def test_an_unaddressed_thread_message_goes_to_the_threads_last_speaker(scene):
    store, channel, portal = scene.store, scene.channel, scene.portal
    say(store, channel, "@me:hs", "@alice @bob hello", "$root")
    say(store, channel, "alice", "alice in main", "$a1")
    say(store, channel, "bob", "bob in main", "$b1")
    assert await route(portal, "and now?") == ["bob"]  # the main timeline's last speaker
    assert await route(portal, "and now?", "$root") == []  # nobody spoke in the thread yet: nobody
    say(store, channel, "alice", "alice in the thread", "$a2", conversation="$root")
    assert await route(portal, "and now?", "$root") == ["alice"]
    assert await route(portal, "and now?") == ["bob"]  # the main timeline keeps its own
    # a thread under bob's answer: bob answers there
    assert await route(portal, "about this", "$b1") == ["bob"]


async def test_a_thread_message_is_taken_with_its_turns_in_the_thread(scene):
    store, channel, portal = scene.store, scene.channel, scene.portal
    say(store, channel, "alice", "alice's answer", "$a1")
    decision, (message, turns) = await portal.take("@me:hs", "more please", "$t1", "more please", None, [], "$a1")
    assert [t.agent for t in decision.answerers] == ["alice"]
    assert message.conversation == "$a1" and [(t.agent, t.conversation) for t in turns] == [("alice", "$a1")]
    # nothing was queued or running in the thread: its turn is claimed in the same write
    assert claimed_in(turns[0], "run-1")
    # a live turn counts at once: the next thread message goes to alice, the main timeline's is its own
    assert await route(portal, "and?", "$a1") == ["alice"]
    assert store.turns.last_live_agent(channel.id) is None


async def test_a_turn_is_claimed_with_its_take_only_where_nothing_waits_before_it(scene):
    store, channel, portal = scene.store, scene.channel, scene.portal
    say(store, channel, "alice", "alice's answer", "$a1")
    portal.lines["$a1"] = portals.TurnQueue(queue=[object()])  # a turn queued in that thread already
    _, (_, (queued,)) = await portal.take("@me:hs", "more", "$t1", "more", None, [], "$a1")
    assert queued.state == TAKEN  # its worker claims it when its turn comes
    _, (_, (main,)) = await portal.take("@me:hs", "@bob hi", "$m1", "@bob hi", None, [], "")
    assert claimed_in(main, "run-1")  # the main timeline has nothing waiting
    scene.portal.parts.stopping.set()  # a stop: nothing is claimed that may not start
    _, (_, (late,)) = await portal.take("@me:hs", "@bob again", "$m2", "@bob again", None, [], "")
    assert late.state == TAKEN


async def test_a_turn_in_a_thread_reads_its_root_and_its_own_messages(scene):
    store, channel = scene.store, scene.channel
    root = say(store, channel, "@me:hs", "the root question", "$root")
    say(store, channel, "bob", "bob in main", "$b1")
    say(store, channel, "@me:hs", "in the thread", "$t1", conversation="$root")
    say(store, channel, "bob", "bob in the thread", "$t2", conversation="$root")
    say(store, channel, "@me:hs", "later in main", "$m2")
    now = say(store, channel, "@me:hs", "@alice your turn", "$t3", conversation="$root")
    member = store.member(channel.id, "alice", "$root")
    read = context_reader(channel.id, 20, 0, "$root")(store, member)
    assert unseen_lines(read, "alice", now.id, True, 20) == [
        UnseenMessage("user", "the root question"),
        UnseenMessage("user", "in the thread"),
        UnseenMessage("bob", "bob in the thread"),
    ]
    # the main timeline's reading has no thread message in it
    read = context_reader(channel.id, 20, 0)(store, store.member(channel.id, "alice"))
    assert unseen_lines(read, "alice", None, True, 20) == [
        UnseenMessage("user", "the root question"),
        UnseenMessage("bob", "bob in main"),
        UnseenMessage("user", "later in main"),
    ]
    # seen in the thread up to a message: only what came after in the thread, the root not again
    store.set_session(channel.id, "alice", "s-thread", fresh=False, conversation="$root")
    store.mark_seen(channel.id, "alice", store.message_by_event("$t1").id, "$root")
    read = context_reader(channel.id, 20, 0, "$root")(store, store.member(channel.id, "alice", "$root"))
    assert unseen_lines(read, "alice", now.id, False, 20) == [UnseenMessage("bob", "bob in the thread")]
    assert root.conversation == ""


class Agent:
    """An agent that opens numbered sessions and can load them (ACP `loadSession`)."""

    def __init__(self, loads: bool = True):
        self.sessions: set[str] = set()
        self.made = 0
        self.loaded: list[str] = []
        self.session_capabilities = SessionCapabilities()  # no session/resume: loads
        if not loads:
            self.load_session = None

    def working_dir(self, cwd):
        return cwd

    async def new_session(self, cwd, servers):
        self.made += 1
        session = f"s{self.made}"
        self.sessions.add(session)
        return session

    async def load_session(self, session_id, cwd, servers):
        self.loaded.append(session_id)
        self.sessions.add(session_id)


async def test_each_member_has_its_own_session_per_conversation(scene):
    store, channel, portal = scene.store, scene.channel, scene.portal
    agent = Agent()
    main = await portal.session_for("alice", agent)
    thread = await portal.session_for("alice", agent, "$root")
    other = await portal.session_for("alice", agent, "$other")
    assert main == ("s1", True) and thread == ("s2", True) and other == ("s3", True)
    assert await portal.session_for("alice", agent, "$root") == ("s2", True)  # kept
    assert await portal.session_for("alice", agent) == ("s1", True)
    assert store.member(channel.id, "alice").session_id == "s1"
    assert store.member(channel.id, "alice", "$root").session_id == "s2"
    # after a restart (the agent knows no session): each is loaded, the thread's in its thread
    restarted = Agent()
    assert await portal.session_for("alice", restarted, "$root") == ("s2", True)
    assert await portal.session_for("alice", restarted) == ("s1", True)
    assert restarted.loaded == ["s2", "s1"] and restarted.made == 0
    # an agent that cannot load: a new, fresh session per conversation
    store.mark_seen(channel.id, "alice", "m1", "$root")  # no longer fresh
    fresh = Agent(loads=False)
    session_id, is_fresh = await portal.session_for("alice", fresh, "$root")
    assert is_fresh and store.member(channel.id, "alice", "$root").session_id == session_id
    assert store.member(channel.id, "alice").session_id == "s1"
    assert [(name, new) for name, _, new in scene.opened] == [
        ("alice", True),
        ("alice", True),
        ("alice", True),
        ("alice", False),
        ("alice", False),
        ("alice", True),
    ]


async def test_a_channel_that_opens_threads_answers_a_top_level_message_in_a_thread_under_it(scene):
    """`!threads on` (store/keys.py `threads`): a main-timeline message someone answers is stored
    in the main timeline, its turns in the thread under it (its own event id); the thread's
    last speaker is then that agent. A message nobody answers, or one in a thread, is as before."""
    from store import keys

    store, channel, portal = scene.store, scene.channel, scene.portal
    store.set_value(keys.threads(channel.id), "on")
    decision, (message, turns) = await portal.take("@me:hs", "@bob hi", "$q1", "@bob hi", None, [], "")
    assert [t.agent for t in decision.answerers] == ["bob"]
    assert message.conversation == "" and [(t.agent, t.conversation) for t in turns] == [("bob", "$q1")]
    assert await route(portal, "and then?", "$q1") == ["bob"]  # the new thread's last speaker
    assert store.turns.last_live_agent(channel.id) is None  # the main timeline has no live turn
    # nobody answers: no thread, and nothing is queued
    decision, (message, turns) = await portal.take("@me:hs", "just a note", "$q2", "just a note", None, [], "")
    assert decision.nobody and turns == [] and message.conversation == ""
    # a message in a thread stays in its thread
    decision, (message, turns) = await portal.take("@me:hs", "@alice there", "$q3", "@alice there", None, [], "$q1")
    assert [(t.agent, t.conversation) for t in turns] == [("alice", "$q1")]
    # off again: the main timeline
    store.delete_value(keys.threads(channel.id))
    decision, (message, turns) = await portal.take("@me:hs", "@bob back", "$q4", "@bob back", None, [], "")
    assert [(t.agent, t.conversation) for t in turns] == [("bob", "")]
