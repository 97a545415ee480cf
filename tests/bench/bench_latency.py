"""Echo floor vs bridge as the owner sees it; in process: the bridge's own latencies, streaming.

`run_owner_side` (the headline figures): the owner is a matrix-nio client in a process of its own
(owner_proc.py), the bridge another (bridge_proc.py), the echo floor (floor.py) in the bench's.
Each round is the owner's Enter (room_send) → the first m.room.message of the answering side seen
in the owner's own `/sync`. Three sides take turns in blocks (three blocks each): the floor, the
floor declaring its mentions, the bridge with an echo agent.

`run_restart` (`--method restart`, the second method of the owner's side): a fresh bridge process
per block (started before it, stopped after), WARMUP rounds not counted then RESTART_BLOCK
measured, blocks of the declaring floor and of the bridge alternating; the same owner process.
SIDEKICKS_BENCH_BLOCKS sets the blocks a side (6); SIDEKICKS_BENCH_TRACE=1 records what each of
the owner's /sync responses held and each round's steps (the floor's stamps, the bridge's
probes); SIDEKICKS_BENCH_DUMP=FILE writes the whole result there as JSON.

`run` (the second table): the bench's own process holds the bridge and the owner's raw client.

One bridge (in process, probes installed) with two scripted agents: `echo` answers at once,
`stream` answers 2,000 tokens (4 characters each) at 100 tokens/s. Three sides take turns in
blocks of BLOCK prompts, one at a time, so all see the same machine and the same Synapse, and no
side's after-work (receipts, typing) lands in another's figures: the floor, the floor declaring
its mentions (`"m.mentions": {}`, as every message the bridge sends does,
docs/architecture.md "The Matrix side": Synapse validates that key at a cost of its own, ~3–4 ms
here), and the bridge. The goal is judged against the floor that sends the same event; the ratio to
the plain floor is shown beside it.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import aiohttp
import probes
import procs
from bridge_harness import agent, start_bridge, write_config
from common import Bench, Owner, body_of, is_final, now, p50, p99
from floor import EchoFloor

ECHO = "@sk_echo:localhost"
STREAM = "@sk_stream:localhost"
TOKENS, TOKEN_RATE, TOKEN_CHARS = 2000, 100, 4
BLOCK = 20  # rounds of one side before the other takes its turn
# the pause after each round, on either side: longer than the bridge's read receipt delay
# (intent.RECEIPT_DELAY) and its send, so a round does not meet the previous answer's receipt at
# the homeserver — a person writes their next message more than 0.4 s after an answer
PAUSE = float(os.environ.get("SIDEKICKS_BENCH_PAUSE", "0.4"))

OWNER_BLOCKS = 3  # blocks per side in the owner's-side measurement
# the second method (run_restart): blocks per side, rounds not counted, rounds measured per block
RESTART_BLOCKS = int(os.environ.get("SIDEKICKS_BENCH_BLOCKS", "6"))
WARMUP, RESTART_BLOCK = 3, 20
TRACE = os.environ.get("SIDEKICKS_BENCH_TRACE") == "1"  # each round's /sync responses and steps, in the result
PROBED = {"SIDEKICKS_BENCH_PROBES": "1"} if TRACE else None


async def run_owner_side(bench: Bench, owner: Owner) -> dict:
    """Enter → first answer event in the owner's own /sync, three sides taking turns in blocks."""
    block = 10 if bench.quick else 40
    folder = bench.folder / "latency-owner"
    floor = EchoFloor(bench.url, bench.floor_registration, bench.floor_port)
    await floor.start()
    config_path = write_config(bench, folder / "cfg", {"echo": agent(title="Echo")})
    bridge = client = None
    out: dict = {"block": block, "blocks": OWNER_BLOCKS, "sides": {}}
    try:
        bridge, _ = await procs.start_bridge(config_path, folder / "data", timeout=120)
        rooms, senders = {}, {}
        for side in ("floor", "declaring"):
            rooms[side] = await owner.create_room(invite=[floor.bot])
            await floor.join(rooms[side])
            await owner.wait_joined(rooms[side], floor.bot)
            senders[side] = floor.bot
        floor.declaring.add(rooms["declaring"])
        rooms["bridge"], senders["bridge"] = await _dm(owner, ECHO), ECHO
        client, _ = await procs.start_owner(bench, timeout=120)
        await owner.stop_sync()  # the bench's own client sits still while the owner's times
        try:

            async def once(side: str, token: str) -> float:
                client.stdin.write(
                    (json.dumps({"room": rooms[side], "text": token, "from": senders[side]}) + "\n").encode()
                )
                await client.stdin.drain()
                line = await asyncio.wait_for(client.stdout.readline(), 60)
                answer = json.loads(line) if line else {"error": "owner_proc ended"}
                if "error" in answer:
                    raise RuntimeError(f"owner's side, {side}: {answer['error']}")
                return answer["s"]

            order = ("floor", "declaring", "bridge")
            for i in range(5):  # warm up: agent start, session/new, connection pools, caches
                for side in order:
                    await once(side, f"owner-w{side[0]}{i}")
                    await asyncio.sleep(PAUSE)
            times: dict[str, list[list[float]]] = {side: [] for side in order}
            for b in range(OWNER_BLOCKS * len(order)):
                side = order[b % len(order)]
                values = []
                for i in range(block):
                    values.append(await once(side, f"owner-{side[0]}{b}-{i}"))
                    await asyncio.sleep(PAUSE)  # the same pause after each, on every side
                times[side].append(values)
            out["sides"] = times
        finally:
            owner.start_sync()
    finally:
        await procs.end(client)
        await procs.end(bridge)
        await floor.stop()
    return out


async def _ask_owner(client, room: str, text: str, sender: str) -> dict:
    """One round of the owner's process: its answer line ({"s": …}, with TRACE its "syncs")."""
    ask = {"room": room, "text": text, "from": sender, "trace": TRACE}
    client.stdin.write((json.dumps(ask) + "\n").encode())
    await client.stdin.drain()
    line = await asyncio.wait_for(client.stdout.readline(), 60)
    answer = json.loads(line) if line else {"error": "owner_proc ended"}
    if "error" in answer:
        raise RuntimeError(f"owner's side, {room}: {answer['error']}")
    return answer


def _cpu_s(pid: int | None) -> float:
    """CPU time (user + system) of process `pid` so far, seconds; 0 without one."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _restart_block(client, room: str, sender: str, tag: str, pids: dict) -> tuple[list[float], list, dict]:
    """WARMUP rounds, then RESTART_BLOCK measured: (seconds each, the traces of all, the CPU
    seconds per measured round of each process in `pids`, name → pid)."""
    values, traces, cpu = [], [], {}
    for i in range(WARMUP + RESTART_BLOCK):
        if i == WARMUP:
            cpu = {name: _cpu_s(pid) for name, pid in pids.items()}
        at = time.time()
        answer = await _ask_owner(client, room, f"bench-{tag}-{i}", sender)
        if i >= WARMUP:
            values.append(answer["s"])
        traces.append(
            {"tag": tag, "i": i, "at": at, "s": answer["s"], "t0": answer.get("t0"), "syncs": answer.get("syncs")}
        )
        await asyncio.sleep(PAUSE)
    per_round = {name: (_cpu_s(pid) - cpu[name]) / RESTART_BLOCK for name, pid in pids.items()}
    return values, traces, per_round


async def _one_block(client, room: str, sender: str, tag: str, pids: dict, bridge_files) -> tuple:
    """One block (_restart_block); with `bridge_files` (config, data folder) a fresh bridge
    process runs it, started before and stopped after (with TRACE, its probes under "probes")."""
    bridge = None
    if bridge_files is not None:
        bridge, _ = await procs.start_bridge(*bridge_files, env=PROBED, timeout=120)
    try:
        values, traces, cpu = await _restart_block(
            client, room, sender, tag, {**pids, "bridge": bridge.pid if bridge else None}
        )
        if TRACE and bridge is not None:
            cpu["probes"] = await procs.ask(bridge, "probes")
    finally:
        await procs.end(bridge)
    return values, traces, cpu


def _stamp(traces: list[dict], floor_stamps: dict, bridge: dict | None) -> None:
    """Each traced round's steps (ms after the owner's Enter): "in" the transaction came, "prompt"
    written (the bridge), "send" started and "sent" answered; from the floor's stamps or the
    bridge's probes (its answers in the order of the rounds, one each)."""
    for n, trace in enumerate(traces):
        token, t0 = f"bench-{trace.get('tag')}-{trace['i']}", trace.get("t0")
        if t0 is None:
            continue
        if bridge is None:
            stamps = floor_stamps.get(token)
            steps = {"in": stamps[0], "send": stamps[1], "sent": stamps[2]} if stamps else {}
        else:
            steps = {"in": bridge["txn_entry"].get(token), "prompt": bridge["prompt_written"].get(token)}
            answer = bridge["answers"][n] if n < len(bridge["answers"]) else None
            if answer and answer["sends"]:
                steps.update(part=answer["first_part"], send=answer["sends"][0][0], sent=answer["sends"][0][1])
        trace["steps"] = {k: round((v - t0) * 1000, 1) for k, v in steps.items() if v is not None}


async def run_restart(bench: Bench, owner: Owner) -> dict:
    """The second method: the bridge restarted before each of its blocks (see the docstring)."""
    blocks = 2 if bench.quick else RESTART_BLOCKS
    folder = bench.folder / "latency-restart"
    floor = EchoFloor(bench.url, bench.floor_registration, bench.floor_port)
    await floor.start()
    config_path = write_config(bench, folder / "cfg", {"echo": agent(title="Echo")})
    client = None
    out: dict = {"blocks": blocks, "block": RESTART_BLOCK, "warmup": WARMUP, "sides": {}, "loadavg": []}
    out["traces"] = {"declaring": [], "bridge": []}
    out["cpu"] = {"declaring": [], "bridge": []}  # CPU seconds per measured round, per process
    synapse = bench.server._proc.pid if bench.server._proc is not None else None
    try:
        room = await owner.create_room(invite=[floor.bot])
        await floor.join(room)
        await owner.wait_joined(room, floor.bot)
        floor.declaring.add(room)
        bridge, _ = await procs.start_bridge(config_path, folder / "data", timeout=120)
        try:
            dm = await _dm(owner, ECHO)
        finally:
            await procs.end(bridge)
        rooms, senders = {"declaring": room, "bridge": dm}, {"declaring": floor.bot, "bridge": ECHO}
        client, _ = await procs.start_owner(bench, timeout=120)
        await owner.stop_sync()
        try:
            times: dict[str, list[list[float]]] = {"declaring": [], "bridge": []}
            for b in range(2 * blocks):
                # floor, bridge, bridge, floor, …: each side goes first in half the pairs
                side = ("declaring", "bridge")[(b + b // 2) % 2]
                out["loadavg"].append(Path("/proc/loadavg").read_text().split()[0])
                pids = {"synapse": synapse, "owner": client.pid}
                start = (config_path, folder / "data") if side == "bridge" else None
                values, traces, cpu = await _one_block(client, rooms[side], senders[side], f"{side[0]}{b}", pids, start)
                if TRACE:
                    _stamp(traces, floor.stamps, cpu.pop("probes", None))
                times[side].append(values)
                out["traces"][side].append(traces)
                out["cpu"][side].append(cpu)
            out["sides"] = times
        finally:
            owner.start_sync()
    finally:
        await procs.end(client)
        await floor.stop()
    return out


def restart_rows(r: dict) -> list[tuple]:
    ms = 1000
    bridge, declaring = _all(r["sides"]["bridge"]), _all(r["sides"]["declaring"])
    b50, b99, f50, f99 = p50(bridge) * ms, p99(bridge) * ms, p50(declaring) * ms, p99(declaring) * ms
    what = f"Enter → first answer in the owner's /sync, bridge restarted per block, p50 / p99 (n={len(bridge)})"
    return [
        (
            "Owner's side, restarts",
            what + ", vs the floor declaring its mentions",
            f"{b50:.1f} / {b99:.1f} ms",
            f"{f50:.1f} / {f99:.1f} ms",
            f"{b50 / f50:.2f}× / {b99 / f99:.2f}×",
            "≤ 1.10× p50",
            b50 / f50 <= 1.10,
        )
    ]


def restart_notes(r: dict) -> list[str]:
    sides = r["sides"]
    per_block = [f"{p50(b) / p50(d):.2f}×" for b, d in zip(sides["bridge"], sides["declaring"])]
    b50 = [f"{p50(b) * 1000:.0f}" for b in sides["bridge"]]
    f50 = [f"{p50(d) * 1000:.0f}" for d in sides["declaring"]]
    return [
        f"owner's side, restarts: {r['blocks']} blocks a side of {r['warmup']} rounds not counted + "
        f"{r['block']} measured, a fresh bridge process per block; bridge / declaring floor p50 per "
        f"block pair: {', '.join(per_block)} (bridge {', '.join(b50)} ms; floor {', '.join(f50)} ms); "
        f"load average at each block: {', '.join(r['loadavg'])}",
        "owner's side, restarts: CPU ms per measured round (median of the blocks), declaring floor / "
        "bridge blocks: "
        + "; ".join(
            f"{name} {p50([c[name] for c in r['cpu']['declaring']]) * 1000:.1f} / "
            f"{p50([c[name] for c in r['cpu']['bridge']]) * 1000:.1f}"
            for name in ("synapse", "owner", "bridge")
        ),
    ] + _step_notes(r)


def _step_notes(r: dict) -> list[str]:
    """With SIDEKICKS_BENCH_TRACE=1: p50 of each step of a measured round, ms, per side (each
    step from the one before it; "seen": the answer's /sync after it was sent)."""
    lines = []
    for side, blocks in r["traces"].items():
        steps: dict[str, list[float]] = {}
        for trace in (t for block in blocks for t in block[r["warmup"] :]):
            before = 0.0
            for name, at in (trace.get("steps") or {}).items():
                steps.setdefault(name, []).append(at - before)
                before = at
            if trace.get("steps"):
                steps.setdefault("seen", []).append(trace["s"] * 1000 - before)
        if steps:
            lines.append(
                f"owner's side, restarts, {side}: p50 per step (ms): "
                + "; ".join(f"{name} {p50(v):.1f}" for name, v in steps.items())
            )
    return lines


def _all(blocks: list[list[float]]) -> list[float]:
    return [v for values in blocks for v in values]


def owner_rows(r: dict) -> list[tuple]:
    ms = 1000
    sides = r["sides"]
    bridge, declaring, plain = _all(sides["bridge"]), _all(sides["declaring"]), _all(sides["floor"])
    n = len(bridge)
    b50, b99, f50, f99 = p50(bridge) * ms, p99(bridge) * ms, p50(declaring) * ms, p99(declaring) * ms
    return [
        (
            "Owner's side",
            f"Enter → first answer in the owner's /sync p50 (n={n}), vs the floor declaring its mentions",
            f"{b50:.1f} ms",
            f"{f50:.1f} ms",
            f"{b50 / f50:.2f}×",
            "≤ 1.10×",
            b50 / f50 <= 1.10,
        ),
        (
            "Owner's side",
            f"Enter → first answer in the owner's /sync p99 (n={n}), vs the floor declaring its mentions",
            f"{b99:.1f} ms",
            f"{f99:.1f} ms",
            f"{b99 / f99:.2f}×",
            "≤ 1.25×",
            b99 / f99 <= 1.25,
        ),
        (
            "Owner's side",
            "p50 / p99, vs the plain floor (no m.mentions)",
            f"{b50:.1f} / {b99:.1f} ms",
            f"{p50(plain) * ms:.1f} / {p99(plain) * ms:.1f} ms",
            f"{p50(bridge) / p50(plain):.2f}× / {p99(bridge) / p99(plain):.2f}×",
            "(info)",
            None,
        ),
    ]


def owner_notes(r: dict) -> list[str]:
    sides = r["sides"]
    per_block = [f"{p50(b) / p50(d):.2f}×" for b, d in zip(sides["bridge"], sides["declaring"])]
    return [
        f"owner's side: the owner (matrix-nio) and the bridge each in a process of their own; "
        f"{r['blocks']} blocks of {r['block']} rounds per side, taking turns; bridge / declaring "
        f"floor p50 per block: {', '.join(per_block)}"
    ]


async def _dm(owner: Owner, puppet: str) -> str:
    room = await owner.create_room(invite=[puppet], direct=True)
    await owner.wait_joined(room, puppet)
    return room


def _first_from(owner: Owner, room: str, sender: str, start: int, test=lambda body: True):
    def find():
        for seen, event in owner.events.get(room, [])[start:]:
            if event.get("sender") == sender and event.get("type") == "m.room.message" and test(body_of(event)):
                return seen
        return None

    return find


async def run(bench: Bench, session: aiohttp.ClientSession, owner: Owner) -> dict:
    probes.install()
    rounds = 40 if bench.quick else 200
    floor = EchoFloor(bench.url, bench.floor_registration, bench.floor_port)
    await floor.start()
    running = await start_bridge(
        bench,
        bench.folder / "bridge-latency",
        {
            "echo": agent(title="Echo"),
            "stream": agent(
                "--answer-size",
                str(TOKENS * TOKEN_CHARS),
                "--chunks",
                str(TOKENS),
                "--delay",
                str(1 / TOKEN_RATE),
                title="Streamer",
            ),
        },
    )
    out: dict = {}
    try:
        floor_rooms = {}
        for side in ("floor", "declaring"):
            floor_rooms[side] = await owner.create_room(invite=[floor.bot])
            await floor.join(floor_rooms[side])
            await owner.wait_joined(floor_rooms[side], floor.bot)
        floor.declaring.add(floor_rooms["declaring"])
        bridge_room = await _dm(owner, ECHO)

        sent: dict[str, tuple[float, float]] = {}  # token → (client sends, client sees the first answer)

        async def floor_once(token: str, side: str = "floor") -> float:
            room = floor_rooms[side]
            start = len(owner.events.get(room, []))
            t0 = now()
            await owner.send_text(room, token)
            seen = await owner.wait_for(_first_from(owner, room, floor.bot, start))
            sent[token] = (t0, seen)
            return seen - t0

        async def bridge_once(token: str) -> tuple[float, float, float]:
            start = len(owner.events.get(bridge_room, []))
            t0 = now()
            await owner.send_text(bridge_room, token)
            first = await owner.wait_for(_first_from(owner, bridge_room, ECHO, start))
            text = await owner.wait_for(_first_from(owner, bridge_room, ECHO, start, lambda b: token in b))
            final = await owner.wait_for(
                _first_from(owner, bridge_room, ECHO, start, lambda b: token in b and is_final(b))
            )
            sent[token] = (t0, first)
            return first - t0, text - t0, final - t0

        for i in range(5):  # warm up: agent start, session/new, connection pools, caches
            await floor_once(f"bench-wf{i}")
            await floor_once(f"bench-wd{i}", "declaring")
            await bridge_once(f"bench-wb{i}")
        probes.reset()
        floor_t, declaring_t, first_t, text_t, final_t = [], [], [], [], []
        # the sides take turns in blocks (BLOCK rounds of one, then of the next, who goes first
        # turning round): each side's own tail (the bridge's read receipt 0.2 s after an
        # answer, its typing off) falls in its own block, not in another side's measurement,
        # and all see the homeserver as its state grows
        block = max(1, min(BLOCK, rounds // 4))
        order = ("floor", "declaring", "bridge")
        for b in range(0, rounds, block):
            turn = (b // block) % len(order)
            for side in order[turn:] + order[:turn]:
                for i in range(b, min(b + block, rounds)):
                    if side == "floor":
                        floor_t.append(await floor_once(f"bench-f{i}"))
                    elif side == "declaring":
                        declaring_t.append(await floor_once(f"bench-d{i}", "declaring"))
                    else:
                        first, text, final = await bridge_once(f"bench-b{i}")
                        first_t.append(first)
                        text_t.append(text)
                        final_t.append(final)
                    await asyncio.sleep(PAUSE)  # the same pause after each, on every side
        out["rounds"] = rounds
        out["floor"] = floor_t
        out["floor_declaring"] = declaring_t
        out["bridge_first"] = first_t
        out["bridge_text"] = text_t
        out["bridge_final"] = final_t
        tokens = [f"bench-b{i}" for i in range(rounds)]
        out["txn_to_prompt"] = [
            probes.prompt_written[t] - probes.txn_entry[t]
            for t in tokens
            if t in probes.prompt_written and t in probes.txn_entry
        ]
        out["phases"] = {k: list(v) for k, v in probes.phases.items()}
        out["steps"] = _steps(rounds, sent, floor.stamps, probes.answers)
        # was an edit (the "thinking" status) in flight when the first part arrived?
        out["part_waited_for_edit"] = sum(
            1
            for a in probes.answers
            if a["first_part"] is not None and any(s[0] < a["first_part"] < s[1] for s in a["sends"])
        )
        out["one_message"] = sum(1 for a in probes.answers if a["sends"] and not any(s[2] for s in a["sends"]))
        out["echo_answers"] = len(probes.answers)
        out["part_to_send"] = [
            a["first_part_send"] - a["first_part"]
            for a in probes.answers
            if a["first_part"] is not None and a["first_part_send"] is not None
        ]

        # ---- streaming ---------------------------------------------------------------------
        stream_room = await _dm(owner, STREAM)
        await owner.send_text(stream_room, "bench-warm")  # agent start and session outside the figure
        await owner.wait_for(
            _first_from(owner, stream_room, STREAM, 0, lambda b: is_final(b) and len(b) >= TOKENS * TOKEN_CHARS), 120
        )
        probes.reset()
        start = len(owner.events.get(stream_room, []))
        await owner.send_text(stream_room, "bench-stream")
        client_final = await owner.wait_for(
            _first_from(owner, stream_room, STREAM, start, lambda b: is_final(b) and len(b) >= TOKENS * TOKEN_CHARS),
            120,
        )
        record = probes.answers[-1]
        streaming = record["stop"] - record["first_part"]
        edits = [s for s in record["sends"] if s[2]]
        during = [s for s in edits if record["first_part"] <= s[0] <= record["stop"]]
        per_message: dict[int, int] = {}
        for s in edits:
            per_message[s[3]] = per_message.get(s[3], 0) + 1
        out["stream"] = {
            "seconds": streaming,
            "token_rate": TOKENS / streaming,
            "edits_per_s": len(during) / streaming,
            "edits_per_message": max(per_message.values()),
            "messages": len(per_message),
            "final_after_stop": record["finish_end"] - record["stop"],
            "client_final_after_stop": client_final - record["stop"],
            # a part that does not end the answer: the first message waits up to stream.SETTLE
            "part_to_send": record["first_part_send"] - record["first_part"],
        }
    finally:
        await running.stop()
        await floor.stop()
    return out


FLOOR_STEPS = (
    "client → transaction in",
    "transaction in → send started",
    "send (request → answer)",
    "send answered → client sees it",
)
BRIDGE_STEPS = (
    "client → transaction in",
    "transaction in → prompt written",
    "prompt → agent's first part",
    "first part → send started",
    "send (request → answer)",
    "send answered → client sees it",
)


def _steps(rounds: int, sent: dict, floor_stamps: dict, answers: list[dict]) -> dict[str, dict[str, list[float]]]:
    """Where each side's time goes, round by round (seconds): the client's stamps, the floor's,
    the bridge's probes. The bridge's answers are in the order of its rounds (one each)."""
    floors: dict[str, dict[str, list[float]]] = {}
    for side, prefix in (("floor", "bench-f"), ("floor declaring its mentions", "bench-d")):
        steps = floors[side] = {name: [] for name in FLOOR_STEPS}
        for i in range(rounds):
            token = f"{prefix}{i}"
            if token in sent and token in floor_stamps:
                (t0, seen), (arrived, started, answered) = sent[token], floor_stamps[token]
                for name, value in zip(
                    FLOOR_STEPS, (arrived - t0, started - arrived, answered - started, seen - answered)
                ):
                    steps[name].append(value)
    bridge: dict[str, list[float]] = {name: [] for name in BRIDGE_STEPS}
    for i, record in enumerate(answers[:rounds]):
        token = f"bench-b{i}"
        if (
            token not in sent
            or token not in probes.txn_entry
            or token not in probes.prompt_written
            or record["first_part"] is None
            or not record["sends"]
        ):
            continue
        (t0, seen), entry, written = sent[token], probes.txn_entry[token], probes.prompt_written[token]
        send_start, send_end = record["sends"][0][0], record["sends"][0][1]
        for name, value in zip(
            BRIDGE_STEPS,
            (
                entry - t0,
                written - entry,
                record["first_part"] - written,
                send_start - record["first_part"],
                send_end - send_start,
                seen - send_end,
            ),
        ):
            bridge[name].append(value)
    return {**floors, "bridge": bridge}


def notes(r: dict) -> list[str]:
    steps = r.get("steps") or {}
    lines = [
        f"where the time goes, p50 per step ({side}): "
        + "; ".join(f"{name} {p50(v) * 1000:.1f} ms" for name, v in by_step.items() if v)
        for side, by_step in steps.items()
    ]
    lines += [
        "in-bridge phases awaited between a transaction and its session/prompt (p50 / p99): "
        + "; ".join(f"{name} {p50(v) * 1000:.1f} / {p99(v) * 1000:.1f} ms" for name, v in r["phases"].items())
    ]
    lines.append(
        f"first agent part: in {r['part_waited_for_edit']} of {len(r['part_to_send'])} answers an "
        "edit (the status line) was already in flight, and the text waited for it"
    )
    lines.append(f"echo answers sent as one message, never edited: {r['one_message']} of {r['echo_answers']}")
    return lines


def rows(r: dict) -> list[tuple]:
    ms = 1000
    f50, f99 = p50(r["floor_declaring"]) * ms, p99(r["floor_declaring"]) * ms  # the same event as the bridge's
    p50_plain, p99_plain = p50(r["floor"]) * ms, p99(r["floor"]) * ms
    b50, b99 = p50(r["bridge_first"]) * ms, p99(r["bridge_first"]) * ms
    s = r["stream"]
    n = r["rounds"]
    return [
        (
            "Echo floor (in process)",
            f"first answer event p50 (n={n}), vs the floor declaring its mentions",
            f"{b50:.1f} ms",
            f"{f50:.1f} ms",
            f"{b50 / f50:.2f}×",
            "≤ 1.10×",
            b50 / f50 <= 1.10,
        ),
        (
            "Echo floor (in process)",
            f"first answer event p99 (n={n}), vs the floor declaring its mentions",
            f"{b99:.1f} ms",
            f"{f99:.1f} ms",
            f"{b99 / f99:.2f}×",
            "≤ 1.10×",
            b99 / f99 <= 1.10,
        ),
        (
            "Echo floor (in process)",
            "first answer event p50 / p99, vs the plain floor (no m.mentions)",
            f"{b50:.1f} / {b99:.1f} ms",
            f"{p50_plain:.1f} / {p99_plain:.1f} ms",
            f"{b50 / p50_plain:.2f}× / {b99 / p99_plain:.2f}×",
            "(info)",
            None,
        ),
        (
            "Echo floor (in process)",
            "bridge: first answer text p50 / p99",
            f"{p50(r['bridge_text']) * ms:.1f} / {p99(r['bridge_text']) * ms:.1f} ms",
            f"{f50:.1f} / {f99:.1f} ms",
            f"{p50(r['bridge_text']) / p50(r['floor_declaring']):.2f}×",
            "(info)",
            None,
        ),
        (
            "Echo floor (in process)",
            "bridge: final text p50 / p99",
            f"{p50(r['bridge_final']) * ms:.1f} / {p99(r['bridge_final']) * ms:.1f} ms",
            f"{f50:.1f} / {f99:.1f} ms",
            f"{p50(r['bridge_final']) / p50(r['floor_declaring']):.2f}×",
            "(info)",
            None,
        ),
        (
            "In bridge",
            "transaction in → session/prompt written p50",
            f"{p50(r['txn_to_prompt']) * ms:.2f} ms",
            "",
            "",
            "≤ 5 ms",
            p50(r["txn_to_prompt"]) * ms <= 5,
        ),
        (
            "In bridge",
            "transaction in → session/prompt written p99",
            f"{p99(r['txn_to_prompt']) * ms:.2f} ms",
            "",
            "",
            "≤ 20 ms",
            p99(r["txn_to_prompt"]) * ms <= 20,
        ),
        (
            "In bridge",
            "first agent part → Matrix send started p50",
            f"{p50(r['part_to_send']) * ms:.2f} ms",
            "",
            "",
            "≤ 5 ms",
            p50(r["part_to_send"]) * ms <= 5,
        ),
        (
            "In bridge",
            "first agent part → Matrix send started p99",
            f"{p99(r['part_to_send']) * ms:.2f} ms",
            "",
            "",
            "(info)",
            None,
        ),
        (
            "Streaming",
            "first agent part → Matrix send started (the answer goes on)",
            f"{s['part_to_send'] * ms:.2f} ms",
            "",
            "",
            "≤ 5 ms",
            s["part_to_send"] * ms <= 5,
        ),
        (
            "Streaming",
            f"edits per second ({TOKENS} tokens at {s['token_rate']:.0f}/s)",
            f"{s['edits_per_s']:.2f}/s",
            "",
            "",
            "≤ 2/s",
            s["edits_per_s"] <= 2,
        ),
        (
            "Streaming",
            f"edits per message ({s['messages']} message(s))",
            f"{s['edits_per_message']}",
            "",
            "",
            "≤ 100",
            s["edits_per_message"] <= 100,
        ),
        (
            "Streaming",
            "final text after stop reason (bridge: final edit accepted)",
            f"{s['final_after_stop'] * ms:.0f} ms",
            "",
            "",
            "≤ 1 s",
            s["final_after_stop"] <= 1,
        ),
        (
            "Streaming",
            "final text after stop reason (seen by the client)",
            f"{s['client_final_after_stop'] * ms:.0f} ms",
            "",
            "",
            "≤ 1 s",
            s["client_final_after_stop"] <= 1,
        ),
    ]


def dump(r: dict) -> None:
    """The restart method's whole result (per-round /sync traces with SIDEKICKS_BENCH_TRACE=1) in
    the JSON file SIDEKICKS_BENCH_DUMP names, if it is set."""
    path = os.environ.get("SIDEKICKS_BENCH_DUMP")
    if path:
        Path(path).write_text(json.dumps(r, indent=1), encoding="utf-8")
