"""bridge/channels/turns/portal.py's pure decisions (no homeserver, no agent)."""

from bridge.channels.turns.portal import session_fits


def test_a_stored_session_is_used_only_in_the_directory_it_was_opened_in():
    assert session_fits("/home/me/work", "/home/me/work")
    assert session_fits("/home/me/work/", "/home/me/work")  # the same place, spelt another way
    assert not session_fits("/home/me/work", "/home/me/other")  # the config moved the agent
    assert not session_fits("/home/me/work", "/home/me/work/sub")
    assert session_fits(None, "/anywhere")  # stored before directories were kept: as before
    # no cwd configured: the agent runs wherever the bridge was started, and keeps its sessions
    # (the local model's KV states with them) whatever that folder is
    assert session_fits("/home/me/work", None) and session_fits(None, None)


async def test_a_stopping_bridge_starts_no_turn():
    """A message taken while the bridge stops (the appservice answers until the answers in
    flight are done) is queued, never started: its record stays taken, and the next start runs
    it. Seen in the restart test: such a turn met the closed agent pool and was answered
    "⚠️ the agent pool is closed", never again."""
    import asyncio
    from types import SimpleNamespace

    from bridge.channels.turns.portal import Incoming, Portal
    from store import Channel

    stopping = asyncio.Event()
    stopping.set()
    parts = SimpleNamespace(stopping=stopping, recovered=asyncio.Event(), config=SimpleNamespace(agents={}))
    channel = Channel(id="c1", room_id="!r:hs", name="general", direct_agent=None, created=0)
    portal = Portal(parts, channel, [])
    turn = SimpleNamespace(id="t1")
    portal.submit(turn, Incoming("m1", "$e1", "hello"))
    assert portal.pending() == 1 and portal.workers() == []

    stopping.clear()  # the same on a running bridge starts its worker
    portal.submit(SimpleNamespace(id="t2"), Incoming("m2", "$e2", "again"))
    workers = portal.workers()
    assert len(workers) == 1 and not workers[0].done()
    workers[0].cancel()
    await asyncio.gather(*workers, return_exceptions=True)


# ---- one queue per conversation ------------------------------------------------------------------


class Held:
    """A portal whose `answer` is recorded and held until the test lets each turn go."""

    def __init__(self, recovered: bool = True):
        import asyncio
        from types import SimpleNamespace

        from bridge.channels.turns.portal import Portal
        from store import Channel

        self.started: list[str] = []
        self.ended: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.recovered = asyncio.Event()
        if recovered:
            self.recovered.set()
        parts = SimpleNamespace(stopping=asyncio.Event(), recovered=self.recovered, config=SimpleNamespace(agents={}))
        channel = Channel(id="c1", room_id="!r:hs", name="general", direct_agent=None, created=0)
        self.portal = Portal(parts, channel, [])
        self.portal.answer = self.answer

    def gate(self, turn_id: str):
        import asyncio

        return self.gates.setdefault(turn_id, asyncio.Event())

    async def answer(self, turn, incoming) -> None:
        self.started.append(turn.id)
        await self.gate(turn.id).wait()
        self.ended.append(turn.id)

    def submit(self, turn_id: str, conversation: str = "") -> None:
        from types import SimpleNamespace

        from bridge.channels.turns.portal import Incoming

        self.portal.submit(
            SimpleNamespace(id=turn_id, conversation=conversation), Incoming(f"m-{turn_id}", f"${turn_id}", "hello")
        )

    async def until(self, condition) -> None:
        import asyncio

        for _ in range(1000):  # each pass lets the workers run to their next wait
            if condition():
                return
            await asyncio.sleep(0)
        raise AssertionError("the workers never got there")

    async def close(self) -> None:
        import asyncio

        for gate in self.gates.values():
            gate.set()
        await asyncio.gather(*self.portal.workers(), return_exceptions=True)


async def test_two_threads_turns_run_side_by_side():
    """A turn held in one thread keeps neither another thread's turn nor the main timeline's
    waiting (docs/architecture.md "Conversations and threads": one queue per conversation)."""
    held = Held()
    held.submit("t1", "$thread1")
    await held.until(lambda: held.started == ["t1"])
    held.submit("t2", "$thread2")
    held.submit("t3", "")
    await held.until(lambda: sorted(held.started) == ["t1", "t2", "t3"])
    assert held.ended == []  # all three run at once: none had to end for another to start
    assert {c for c in held.portal.lines} == {"$thread1", "$thread2", ""}
    await held.close()


async def test_inside_one_conversation_turns_run_one_at_a_time_oldest_first():
    held = Held()
    held.submit("t1", "$thread1")
    await held.until(lambda: held.started == ["t1"])
    held.submit("t5", "$thread1")
    held.submit("t3", "$thread1")  # taken earlier than t5 (ids sort by the time taken)
    assert held.portal.pending("$thread1") == 2 and held.portal.pending("") == 0
    assert held.portal.pending() == 2
    for _ in range(50):
        await __import__("asyncio").sleep(0)
    assert held.started == ["t1"]  # the thread's second turn waits for its first
    held.gate("t1").set()
    await held.until(lambda: held.started == ["t1", "t3"])
    assert held.ended == ["t1"]
    held.gate("t3").set()
    await held.until(lambda: held.started == ["t1", "t3", "t5"])
    assert held.ended == ["t1", "t3"]
    await held.close()


async def test_a_turn_queued_twice_runs_once_and_workers_wait_for_recovery():
    """Nothing starts before the turns an earlier run left are queued (parts.recovered); a
    turn queued by two paths (recovery, the homeserver sending it again) is queued once."""
    held = Held(recovered=False)
    held.submit("t2", "$thread1")
    held.submit("t1", "$thread1")  # recovery queues an older one meanwhile
    held.submit("t1", "$thread1")
    for _ in range(50):
        await __import__("asyncio").sleep(0)
    assert held.started == [] and held.portal.pending("$thread1") == 2
    held.recovered.set()
    await held.until(lambda: held.started == ["t1"])
    held.gate("t1").set()
    await held.until(lambda: held.started == ["t1", "t2"])
    await held.close()
    assert held.ended == ["t1", "t2"]


def test_current_is_the_main_timelines_turn_else_a_threads():
    from types import SimpleNamespace

    from bridge.channels.turns.portal import Portal
    from store import Channel

    parts = SimpleNamespace(config=SimpleNamespace(agents={}))
    portal = Portal(parts, Channel(id="c1", room_id="!r:hs", name="general", direct_agent=None, created=0), [])
    assert portal.current is None and portal.run_in("$t") is None
    in_thread, in_main = SimpleNamespace(name="thread"), SimpleNamespace(name="main")
    portal.runs["$t"] = in_thread
    assert portal.current is in_thread and portal.run_in("$t") is in_thread
    portal.runs[""] = in_main
    assert portal.current is in_main and portal.run_in("") is in_main
    assert set(map(id, portal.clear())) == {id(in_thread), id(in_main)}


def test_a_turn_waiting_for_its_agent_says_where_the_agent_answers():
    """An agent answers one prompt at a time wherever it is (docs/architecture.md "Who answers"): a
    turn waiting for it names the other channel, or says it answers in another conversation of this
    one."""
    from types import SimpleNamespace

    from bridge.channels.turns.turns import waiting_note

    here = SimpleNamespace(channel=SimpleNamespace(name="general", direct_agent=None))
    elsewhere = SimpleNamespace(channel=SimpleNamespace(name="other", direct_agent=None))
    pool = SimpleNamespace(state=lambda agent: "busy")
    channels = SimpleNamespace(active_turns={"alice": here}, waiting={"alice": []})
    assert (
        waiting_note(channels, pool, "alice", here=here) == "answering in another conversation here; this one is next"
    )
    assert (
        waiting_note(channels, pool, "alice", 2, here)
        == "answering in another conversation here; 2 more before this one"
    )
    channels.active_turns["alice"] = elsewhere
    assert waiting_note(channels, pool, "alice", here=here) == "answering in #other; this channel is next"
