"""Usage and budgets (docs/sessions.md): real Synapse, the real bridge in-process, the scripted
agent reporting its session's cumulative cost in `usage_update`s. Budget $1.00 a day: the
answer's status line shows the usage; the turn that passes the cap is cancelled and ends with one
line; the next prompt is refused in one line without reaching the agent; `!budget` says so;
`!budget raise 1` lets the agent answer again. The spend is in the store."""

from __future__ import annotations

from datetime import UTC, datetime

from bridge_harness import agent, answers_in, wait_until
from helpers import ALICE, open_dm, originals, prompts, received, say
from matrix_helpers import events_in, sync_until


def said(owner, room_id: str, text: str) -> bool:
    return any(text in e["content"].get("body", "") for e in originals(owner, room_id, ALICE))


def finals(owner, room_id: str) -> list[str]:
    return [
        a["body"]
        for a in answers_in(events_in(owner, room_id), ALICE)
        if a["msgtype"] != "m.notice" and not a["body"].startswith(("⏳", "✍️", "💭", "🔧"))
    ]


async def test_an_agent_over_its_budget_is_stopped_refused_and_goes_on_once_raised(bridge_factory, tmp_path, owner):
    log, release = tmp_path / "alice.log", tmp_path / "release"
    running = await bridge_factory(
        {"alice": agent("--log", str(log), title="Alice", budget={"cost": 1.0, "per": "day"})}
    )
    try:
        room_id = await open_dm(owner)
        held = tmp_path / "held"
        await say(owner, room_id, f"[[chunks:2]] [[cost:0.6]] [[hold:{held}]] first")

        def history() -> list[str]:
            return [h for a in answers_in(events_in(owner, room_id), ALICE) for h in a["history"]]

        # the usage is shown in the status line while it answers
        await sync_until(owner, lambda: any("· context 1k/200k · $0.60\n" in h for h in history()), timeout=60)
        held.touch()
        await sync_until(owner, lambda: any(b.endswith("first") for b in finals(owner, room_id)), timeout=60)

        # the next turn's cost passes the cap: cancelled, one line
        await say(owner, room_id, f"[[chunks:2]] [[cost:0.6]] [[hold:{release}]] second")
        await sync_until(
            owner,
            lambda: any(
                "⛔ stopped: Alice reached its budget, $1.20 of $1.00 today (UTC)" in b for b in finals(owner, room_id)
            ),
            timeout=60,
        )
        await wait_until(lambda: any(m.get("method") == "session/cancel" for m in received(log)))
        await running.idle()

        # refused without reaching the agent
        await say(owner, room_id, "third")
        await sync_until(
            owner,
            lambda: any(
                b.startswith("⛔ Alice has spent its budget today (UTC) ($1.20 of $1.00)")
                for b in finals(owner, room_id)
            ),
            timeout=60,
        )
        await running.idle()
        assert len(prompts(log)) == 2
        await say(owner, room_id, "!budget")
        await sync_until(owner, lambda: said(owner, room_id, "Alice: $1.20 of $1.00 today (UTC) — spent"), timeout=60)
        await say(owner, room_id, "!budget raise 1")
        await sync_until(
            owner,
            lambda: said(owner, room_id, "Alice: $1.20 of $2.00 today (UTC) (raised by $1.00) — within it"),
            timeout=60,
        )
        await say(owner, room_id, "fourth")
        await sync_until(
            owner,
            lambda: any(b.endswith("fourth") and b.startswith("echo") for b in finals(owner, room_id)),
            timeout=60,
        )
        assert len(prompts(log)) == 3
        day = f"day:{datetime.now(UTC):%Y-%m-%d}"
        spent = running.store.spending.get("alice", day)
        assert (round(spent.amount, 6), spent.raised, spent.currency) == (1.2, 1.0, "USD")
    finally:
        release.touch()
        (tmp_path / "held").touch()


async def test_a_channel_over_its_budget_stops_its_turn_and_refuses_until_raised(bridge_factory, tmp_path, owner):
    log, release = tmp_path / "alice.log", tmp_path / "release"
    running = await bridge_factory({"alice": agent("--log", str(log), title="Alice")})  # no budget of its own
    try:
        room_id = await open_dm(owner)
        await say(owner, room_id, "!budget channel 1 per day")
        await sync_until(owner, lambda: said(owner, room_id, "today (UTC); its agents have reported no cost"))
        channel = next(
            b for e in originals(owner, room_id, ALICE) if (b := e["content"].get("body", "")).startswith("#")
        ).split(":")[0]
        await say(owner, room_id, "[[cost:0.6]] first")
        await sync_until(owner, lambda: any(b.endswith("first") for b in finals(owner, room_id)), timeout=60)

        # the next turn's cost passes the channel's cap: cancelled, one line
        await say(owner, room_id, f"[[chunks:2]] [[cost:0.6]] [[hold:{release}]] second")
        stopped = f"⛔ stopped: {channel} reached its budget, $1.20 of $1.00 today (UTC)"
        await sync_until(owner, lambda: any(stopped in b for b in finals(owner, room_id)), timeout=60)
        await running.idle()

        # refused in the channel without reaching the agent, until the owner raises it
        await say(owner, room_id, "third")
        refused = f"⛔ {channel} has spent its budget today (UTC) ($1.20 of $1.00): agents answer here again"
        await sync_until(owner, lambda: any(b.startswith(refused) for b in finals(owner, room_id)), timeout=60)
        await running.idle()
        assert len(prompts(log)) == 2
        await say(owner, room_id, "!budget channel raise 1")
        await sync_until(
            owner, lambda: said(owner, room_id, f"{channel}: $1.20 of $2.00 today (UTC) (raised by $1.00)")
        )
        await say(owner, room_id, "fourth")
        await sync_until(owner, lambda: any(b.endswith("fourth") for b in finals(owner, room_id)), timeout=60)
        assert len(prompts(log)) == 3
        assert running.store.spending.get("alice", f"day:{datetime.now(UTC):%Y-%m-%d}").raised == 0.0  # the channel's
    finally:
        release.touch()
