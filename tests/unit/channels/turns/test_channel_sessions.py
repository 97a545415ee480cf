"""Sessions the owner sees and changes (bridge/channels/turns/sessions.py): the pure list and titles,
and `!sessions`, `!resume`, `!reset`, `!fork` and the portal's resume-over-load with a real store
and fake agents (the real ones: tests/integration/test_sessions.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fake_places import ConfiguredPlaces
from scene_helpers import PortalNotices, store_with_channel

from acp import SessionCapabilities, SessionInfo
from bridge.channels.base.conversations import Here
from bridge.channels.turns.portal import Portal
from bridge.channels.turns.sessions import (
    Listed,
    SessionCommands,
    ago,
    close_sessions,
    format_sessions,
    iso_ms,
    merged,
    title_line,
)
from store import SessionRecord
from store.gone import GONE
from store.offloop import OffLoop

MIN = 60_000


def test_a_title_is_the_first_line_with_words_cut_at_a_word():
    assert title_line("\n\n  Plan   the trip \nmore") == "Plan the trip"
    assert title_line("word " * 30, limit=20) == "word word word word…"
    assert title_line("x" * 30, limit=10) == "x" * 9 + "…"
    assert title_line(" \n ") is None


def test_times_in_words():
    assert iso_ms("1970-01-01T00:01:00Z") == MIN
    assert iso_ms("1970-01-01T00:01:00+00:00") == MIN and iso_ms("soon") is None and iso_ms(None) is None
    assert [
        ago(used, 10 * 86400_000)
        for used in (
            None,
            10 * 86400_000 - 5000,
            10 * 86400_000 - 5 * MIN,
            10 * 86400_000 - 180 * MIN,
            7 * 86400_000,
            9 * 86400_000,
        )
    ] == ["last use unknown", "just now", "5 min ago", "3 h ago", "3 days ago", "1 day ago"]


def test_the_list_is_numbered_with_the_current_one_marked():
    listed = [Listed("sess_new", "Second  thoughts\nmore", 10 * MIN), Listed("sess_0123456789abcdef", None, None)]
    assert format_sessions("Alice", "alice", listed, "sess_new", 12 * MIN, in_thread=False) == [
        "Alice (@alice), sessions here:",
        "  1. Second thoughts more — 2 min ago ← current",
        "  2. untitled (sess_0123456) — last use unknown",
    ]
    assert format_sessions("Bob", "bob", [], None, 0, in_thread=True) == ["Bob (@bob): no sessions in this thread yet."]


def test_the_agents_list_leaves_out_sessions_of_other_conversations():
    records = [
        SessionRecord("c1", "alice", "", "s1", "hello", 1, 5),
        SessionRecord("c1", "alice", "$thread", "s2", "in a thread", 1, 6),
        SessionRecord("c2", "alice", "", "s3", "elsewhere", 1, 7),
    ]
    listed = [Listed("s1", None, None), Listed("s2", "x", 1), Listed("s3", "y", 1), Listed("s4", "outside", 9)]
    assert merged(listed, records, "c1", "") == [Listed("s1", "hello", 5), Listed("s4", "outside", 9, elsewhere=True)]
    assert merged(listed, records, "c1", "$thread") == [
        Listed("s2", "x", 1),
        Listed("s4", "outside", 9, elsewhere=True),
    ]


def test_a_kicked_members_sessions_are_not_listed_in_another_room():
    """Kicked from c1, alice's sessions there are kept GONE (store/gone.py): the agent's own
    list, asked in c2, shows none of them, not even as another client's."""
    records = [SessionRecord("c1", "alice", GONE, "s1", "secret plans", 1, 5)]
    listed = [Listed("s1", "secret plans", 5), Listed("s4", "outside", 9)]
    assert merged(listed, records, "c2", "") == [Listed("s4", "outside", 9, elsewhere=True)]


def test_a_session_made_by_another_client_is_marked_elsewhere():
    listed = [Listed("s1", "mine", MIN), Listed("s9", "From Zed", MIN, elsewhere=True)]
    assert format_sessions("Alice", "alice", listed, "s1", 2 * MIN, in_thread=False)[1:] == [
        "  1. mine — 1 min ago ← current",
        "  2. From Zed — 1 min ago — elsewhere (another client's: !resume carries it on here)",
    ]


class Agent:
    """A running agent that opens numbered sessions; `caps` what sessionCapabilities it announces."""

    def __init__(self, caps: SessionCapabilities = SessionCapabilities(), loads: bool = True):
        self.session_capabilities = caps
        self.sessions: set[str] = set()
        self.made = 0
        self.calls: list[tuple[str, str]] = []
        self.titles: dict[str, str] = {}
        self.listing: list[SessionInfo] = []
        if not loads:
            self.load_session = None

    def working_dir(self, cwd):
        return cwd

    def state(self, session_id):
        return SimpleNamespace(title=self.titles.get(session_id))

    async def new_session(self, cwd, servers):
        self.made += 1
        self.sessions.add(f"s{self.made}")
        return f"s{self.made}"

    async def load_session(self, session_id, cwd=None, servers=None):
        self.calls.append(("load", session_id))
        self.sessions.add(session_id)

    async def resume_session(self, session_id, cwd=None, servers=None):
        self.calls.append(("resume", session_id))
        self.sessions.add(session_id)

    async def fork_session(self, session_id, cwd=None, servers=None):
        self.calls.append(("fork", session_id))
        self.sessions.add(f"{session_id}-fork")
        return f"{session_id}-fork"

    async def list_sessions(self, cwd=None):
        self.calls.append(("list", ""))
        return list(self.listing)

    async def close_session(self, session_id):
        self.calls.append(("close", session_id))
        self.sessions.discard(session_id)
        return self.session_capabilities.close


ALL = SessionCapabilities(list=True, resume=True, fork=True, close=True)


@pytest.fixture
async def scene():
    store, channel = store_with_channel("!room:hs", "general", ("alice",))
    notices = PortalNotices()
    sent: list[dict] = []
    agents: dict[str, Agent] = {}

    async def send(room_id, content):
        sent.append(content)
        return f"$root{len(sent)}"

    async def opened(portal, agent_name, agent, session_id, new, conversation=""):
        pass

    async def get(name):
        return agents[name]

    async def puppet(name):
        return SimpleNamespace(intent=SimpleNamespace(send=send))

    config = SimpleNamespace(
        agents={"alice": SimpleNamespace(cwd=None, title="Alice"), "bob": SimpleNamespace(cwd=None, title="Bob")},
        agent_for_user_id=lambda u: None,
    )
    parts = SimpleNamespace(
        db=OffLoop(store),
        config=config,
        aliases={"alice": "alice", "bob": "bob"},
        run_id="run-1",
        mcp_servers=lambda portal, name, agent, conversation: [],
        settings=SimpleNamespace(opened=opened),
        notices=notices,
        pool=SimpleNamespace(get=get, agent=lambda name: agents.get(name)),
        identities=SimpleNamespace(puppet=puppet),
        places=ConfiguredPlaces(config),
    )
    portal = Portal(parts, channel, ["alice"])
    yield SimpleNamespace(
        store=store,
        channel=channel,
        portal=portal,
        said=notices.said,
        sent=sent,
        agents=agents,
        commands=SessionCommands(),
    )
    store.close()


async def run(scene, line, conversation="", event_id="$cmd"):
    name, *args = line.lstrip("!").split()
    scene.said.clear()
    await scene.commands.command(scene.portal, name, tuple(args), Here(conversation, event_id))
    return "\n".join(text for text, _ in scene.said)


async def test_after_a_restart_a_stored_session_is_resumed_where_the_agent_offers_both(scene):
    first = scene.agents["alice"] = Agent(ALL)
    assert await scene.portal.session_for("alice", first) == ("s1", True)
    restarted = Agent(SessionCapabilities(resume=True))
    assert await scene.portal.session_for("alice", restarted) == ("s1", True)
    assert restarted.calls == [("resume", "s1")]
    loading = Agent()  # load only
    await scene.portal.session_for("alice", loading)
    assert loading.calls == [("load", "s1")]


async def test_sessions_resume_and_reset_with_the_bridges_record(scene):
    agent = scene.agents["alice"] = Agent()  # can load, lists nothing itself
    assert "no sessions here yet" in await run(scene, "!sessions")
    await scene.portal.session_for("alice", agent)
    scene.store.sessions.used(scene.channel.id, "alice", "", "s1", first_line="the first question")
    said = await run(scene, "!reset")
    assert "starts a new session" in said
    assert scene.store.member(scene.channel.id, "alice").session_id == "s2"
    listing = await run(scene, "!sessions")
    assert "1. untitled (s2) — just now ← current" in listing
    assert "2. the first question — just now" in listing
    assert "s1" not in agent.sessions  # left: closed (here: only forgotten, the agent cannot close)
    assert "goes on in session 2 (the first question)" in await run(scene, "!resume 2")
    assert agent.calls == [("close", "s1"), ("load", "s1"), ("close", "s2")]
    assert scene.store.member(scene.channel.id, "alice").session_id == "s1"
    assert "no session 5" in await run(scene, "!resume 5")
    assert "already" in await run(scene, "!resume 1")  # s1 is first now: last used
    assert "Usage: !resume [AGENT] N" in await run(scene, "!resume")
    assert "bob is not in this channel" in await run(scene, "!reset bob")


async def test_an_agent_that_cannot_fork_says_so_in_one_line(scene):
    scene.agents["alice"] = Agent()
    await scene.portal.session_for("alice", scene.agents["alice"], "$t")
    said = await run(scene, "!fork", conversation="$t")
    assert said == "Alice cannot fork sessions (it offers no session/fork)."
    assert scene.said[0][1]["event_id"] == "$t"  # said in the thread
    assert scene.sent == []


async def test_fork_posts_a_thread_root_whose_session_is_the_copy(scene):
    agent = scene.agents["alice"] = Agent(ALL)
    assert "no session here to fork" in await run(scene, "!fork")
    await scene.portal.session_for("alice", agent)
    await run(scene, "!fork")
    assert scene.sent[0]["body"].startswith("Forked from the main timeline")
    assert ("fork", "s1") in agent.calls
    assert scene.store.member(scene.channel.id, "alice", "$root1").session_id == "s1-fork"
    assert scene.store.message_by_event("$root1").sender == "alice"  # it answers there unaddressed
    # the agent's own list: the copy belongs to the new thread, not here
    agent.listing = [SessionInfo("s1-fork", "/w", "Copy"), SessionInfo("s1", "/w", "Original")]
    listing = await run(scene, "!sessions")
    assert "1. Original" in listing and "Copy" not in listing
    assert "1. Copy" in await run(scene, "!sessions", conversation="$root1")


async def test_closing_asks_the_running_agents_only(scene):
    agent = scene.agents["alice"] = Agent(ALL)
    await scene.portal.session_for("alice", agent)

    def running(name):
        if name == "carol":
            raise KeyError("unknown agent: carol")  # no longer configured
        return scene.agents.get(name)

    pool = SimpleNamespace(agent=running)
    assert (
        await close_sessions(
            pool, [("alice", "s1"), ("alice", "s1"), ("alice", "gone"), ("bob", "b1"), ("carol", "c1")]
        )
        == 1
    )
    assert [c for c in agent.calls if c[0] == "close"] == [("close", "s1")]
