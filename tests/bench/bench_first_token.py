"""The local agent's first token as the owner sees it, step by step (docs/performance.md
"The local agent's first token").

The owner is a matrix-nio client in a process of its own (owner_proc.py, `"until": "text"`), the
bridge another (bridge_proc.py, with probes.py's stamps), the agent the shipped local agent
(acp.agents.local_model, SmolLM2-135M) run through traced_agent.py, in its sandbox as `sidekicks
up` runs it. Each round: the owner's Enter (room_send) → the first event of the puppet whose body
shows answer text, seen in the owner's own `/sync`. Every process stamps with
time.perf_counter() (CLOCK_MONOTONIC, one clock for the machine), so each round splits into the
steps of STEPS.

    cold, new:  the first message in a new DM, the bridge just started: the agent starts, opens a
                session, loads the model; its sessions folder has the shared prefix's KV state
                (another DM's agent made it before the restart);
    cold, new, first ever:  the same in a fresh sessions folder: the turn makes the prefix;
    cold:       the first message after a restart of the bridge, in that DM (session/load);
    cold, as before:  the same, the agent started as before its model loaded in the background
                (traced_agent.py --as-before), the two kinds taking turns restart by restart;
    warm:       the next messages in that DM, each after the previous answer ended and a pause.

For the cold kinds, a second table gives each moment of the agent's start after the bridge's
transaction (the load's steps overlap the handshake), and the CPU times of the load's parts.

The answers are cut at 24 tokens (the first token does not depend on it); temperature 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1]), str(HERE.parent)]

import procs  # noqa: E402
from bridge_harness import write_config  # noqa: E402
from common import Bench, Owner, p50, p99  # noqa: E402

LOCAL = "@sk_local:localhost"
PAUSE = 1.0  # after an answer ended: a person reads it before writing again
QUESTIONS = [
    "What is a good flower for a shady garden?",
    "How often should I water tomatoes?",
    "Name three birds that visit gardens.",
    "What is compost made of?",
    "When do apple trees bloom?",
    "Why do leaves change colour?",
    "How deep should I plant tulip bulbs?",
    "What does moss need to grow?",
]

# (name, from stamp, to stamp); stamps: owner's t0/sent/text, bridge's txn/prompt/part/send/
# answered, the agent's (traced_agent.py)
STEPS = (
    ("Enter → transaction in the bridge (owner → Synapse → bridge)", "t0", "txn"),
    ("transaction → session/prompt written (bridge; cold: agent start, session)", "txn", "prompt"),
    ("  cold, of that: transaction → the agent's initialize (process start)", "txn", "initialize"),
    ("  cold, of that: initialize → session/new or session/load", "initialize", "session"),
    ("  cold, of that: session opened → prompt written", "session", "prompt"),
    ("prompt written → read by the agent (pipe, reader thread)", "prompt", "read"),
    ("read → parsed on the agent's event loop", "read", "parsed"),
    ("parsed → generation thread started", "parsed", "thread"),
    ("model load (cold) and the model's lock", "thread", "fit_start"),
    ("the cut: messages counted (fit)", "fit_start", "fit_end"),
    ("the session's KV state restored", "fit_end", "restored"),
    ("chat template", "restored", "tokenize_start"),
    ("prompt tokenized", "tokenize_start", "tokenize_end"),
    ("prefix match, sampler set up", "tokenize_end", "eval_start"),
    ("evaluation of the new tokens", "eval_start", "eval_end"),
    ("first token sampled", "eval_end", "sample_end"),
    ("detokenized, stop check → first piece", "sample_end", "piece"),
    ("piece → event loop → written to stdout", "piece", "written"),
    ("agent stdout → the bridge has the part", "written", "part"),
    ("part → Matrix send started (placeholder, grace, edit)", "part", "send"),
    ("the send (request → answer)", "send", "answered"),
    ("send answered → owner's /sync shows it", "answered", "text"),
)
# the cold kinds: moments of the agent's start after the transaction (the agent's stamps,
# traced_agent.py; the load runs beside the handshake, so these overlap)
COLD_MOMENTS = (
    ("the agent's Python is up (its first line)", "agent_start"),
    ("its modules imported (main begins)", "agent_ready"),
    ("llama_cpp's import begins", "import_start"),
    ("llama_cpp imported", "import_end"),
    ("initialize received", "initialize"),
    ("the model's file and context: load begins", "open_start"),
    ("session/new or session/load received", "session"),
    ("session/prompt written (bridge)", "prompt"),
    ("session/prompt read by the agent", "read"),
    ("the model's file and context loaded", "open_end"),
    ("the prompt has the model (the cut begins)", "fit_start"),
    ("the session's KV state restored", "restored"),
    ("evaluation ends", "eval_end"),
    ("first chunk written to stdout", "written"),
    ("first token in the owner's client", "text"),
)
KINDS = ("warm", "cold", "cold, as before", "cold, new", "cold, new, first ever")
COLD_CPU = (
    ("CPU: llama_cpp's import (its thread)", "import_cpu"),
    ("CPU: the model's file and context (its thread)", "open_cpu"),
    ("CPU: the agent's process, start to first chunk", "process_cpu"),
)


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


async def run(bench: Bench, owner: Owner, ahead: bool = True) -> dict:
    """`ahead` False: the agent without its own preparation of the next turn (traced_agent.py)."""
    warm_rounds = 6 if bench.quick else 16
    restarts = 4 if bench.quick else 8  # half of them as before (traced_agent.py --as-before)
    folder = bench.folder / "first-token"
    trace = folder / "trace.jsonl"

    def configure(as_before: bool = False) -> Path:
        command = [
            sys.executable,
            str(HERE / "traced_agent.py"),
            str(trace),
            *([] if ahead else ["--no-ahead"]),
            *(["--as-before"] if as_before else []),
            "--sessions",
            str(folder / "sessions"),
            "--temperature",
            "0",
            "--max-tokens",
            "24",
        ]
        sandbox = {"write": [str(folder)], "network": "off"}
        return write_config(
            bench, folder / "cfg", {"local": {"command": command, "title": "SmolLM2", "sandbox": sandbox}}
        )

    config = configure()
    env = {"SIDEKICKS_BENCH_PROBES": "1"}
    out: dict = {"rounds": [], "load": [load_average()]}
    bridge = client = None
    try:
        bridge, _ = await procs.start_bridge(config, folder / "data", env=env)
        room = await owner.create_room(invite=[LOCAL], direct=True)
        await owner.wait_joined(room, LOCAL)
        second = await owner.create_room(invite=[LOCAL], direct=True)  # a new DM after a restart
        await owner.wait_joined(second, LOCAL)
        client, _ = await procs.start_owner(bench)
        await owner.stop_sync()  # the bench's own client sits still while the owner's times
        try:
            n = 0

            async def once(kind: str, where: str = room) -> None:
                nonlocal n
                token = f"bench-t{n}"
                text = f"{token} {QUESTIONS[n % len(QUESTIONS)]}"
                n += 1
                bridge.stdin.write(b"reset\n")  # answered by nothing
                ask = {"room": where, "text": text, "from": LOCAL, "until": "text"}
                seen = await procs.ask(client, json.dumps(ask))
                if "error" in seen:
                    raise RuntimeError(f"first token, {kind}: {seen['error']}")
                while True:  # the answer ends before the next round
                    probed = await procs.ask(bridge, "probes")
                    answers = probed["answers"]
                    if answers and answers[-1]["finish_end"] is not None:
                        break
                    await asyncio.sleep(0.1)
                out["rounds"].append({"kind": kind, "token": token, "owner": seen, "bridge": probed})
                await asyncio.sleep(PAUSE)

            await once("cold, new, first ever")
            for _ in range(warm_rounds // 2):
                await once("warm")
            # the two kinds take turns; then the agent as shipped, in a new DM, which the warm
            # rounds after go on with
            for i in range(restarts):
                await procs.end(bridge)
                bridge = None
                as_before = (restarts - i) % 2 == 0
                bridge, _ = await procs.start_bridge(configure(as_before), folder / "data", env=env)
                await once("cold, as before" if as_before else "cold")
                out["load"].append(load_average())
            await procs.end(bridge)
            bridge = None
            bridge, _ = await procs.start_bridge(configure(), folder / "data", env=env)
            await once("cold, new", second)
            for _ in range(warm_rounds - warm_rounds // 2):
                await once("warm", second)
            out["load"].append(load_average())
        finally:
            owner.start_sync()
    finally:
        await procs.end(client)
        await procs.end(bridge)
    traces = {}
    if trace.exists():
        for line in trace.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            traces[record["token"]] = record
    for r in out["rounds"]:
        r["stamps"], r["info"] = _stamps(r, traces.get(r["token"]))
    return out


def _stamps(r: dict, agent: dict | None) -> tuple[dict[str, float], dict]:
    """Every stamp of one round, absolute (perf_counter seconds)."""
    owner, probed, token = r["owner"], r["bridge"], r["token"]
    s: dict[str, float] = {"t0": owner["t0"], "text": owner["t0"] + owner["text_s"]}
    if token in probed["txn_entry"]:
        s["txn"] = probed["txn_entry"][token]
    if token in probed["prompt_written"]:
        s["prompt"] = probed["prompt_written"][token]
    info: dict = {"first_event": owner["s"], "text": owner["text_s"]}
    answer = probed["answers"][-1] if probed["answers"] else None
    if answer and answer["first_part"] is not None:
        s["part"] = answer["first_part"]
        sends = [x for x in answer["sends"] if x[0] >= answer["first_part"]]
        if sends:
            s["send"], s["answered"] = sends[0][0], sends[0][1]
            info["text_in_first_message"] = sends[0] is answer["sends"][0]
            placeholder = answer["sends"][0]
            # the placeholder's send was under way when the first part came: the edit waits for it
            info["waited_for_placeholder"] = (
                placeholder[1] - answer["first_part"]
                if placeholder[0] <= answer["first_part"] < placeholder[1]
                else 0.0
            )
    if agent:
        s.update(agent["stamps"])
        info.update(agent["info"])
    return s, info


def _step(stamps: dict, a: str, b: str) -> float | None:
    if a in stamps and b in stamps:
        return stamps[b] - stamps[a]
    return None


def breakdown(rounds: list[dict]) -> list[tuple[str, float]]:
    """p50 of each step over `rounds` (seconds), and the total."""
    out = []
    for name, a, b in STEPS:
        values = [v for r in rounds if (v := _step(r["stamps"], a, b)) is not None]
        out.append((name, p50(values) if values else float("nan")))
    out.append(("total: Enter → first token in the owner's client", p50([r["info"]["text"] for r in rounds])))
    return out


def _kinds(r: dict) -> dict[str, list[dict]]:
    kinds: dict[str, list[dict]] = {}
    for round_ in r["rounds"]:
        kinds.setdefault(round_["kind"], []).append(round_)
    return kinds


def rows(r: dict) -> list[tuple]:
    kinds = _kinds(r)
    goals = {"warm": 0.30, "cold": 1.0, "cold, new": 1.0, "cold, new, first ever": 1.0, "cold, as before": 1.0}
    out = []
    for kind in KINDS:
        rounds = kinds.get(kind) or []
        if not rounds:
            continue
        values = [x["info"]["text"] for x in rounds]
        out.append(
            (
                "First token",
                f"{kind}: Enter → first token in the owner's /sync p50 / p99 (n={len(values)})",
                f"{p50(values) * 1000:.0f} / {p99(values) * 1000:.0f} ms",
                "",
                "",
                f"≤ {goals[kind]:.2f} s",
                p50(values) <= goals[kind],
            )
        )
    return out


def notes(r: dict) -> list[str]:
    kinds = _kinds(r)
    lines = [f"first token: load average during the run {', '.join(r['load'])}"]
    for kind, rounds in kinds.items():
        steps = "; ".join(f"{name} {v * 1000:.1f}" for name, v in breakdown(rounds) if v == v)
        evaluated = [x["info"].get("eval_tokens") for x in rounds if x["info"].get("eval_tokens") is not None]
        cpu = [x["info"].get("eval_cpu") for x in rounds if x["info"].get("eval_cpu") is not None]
        first = sum(1 for x in rounds if x["info"].get("text_in_first_message"))
        waited = [x["info"]["waited_for_placeholder"] for x in rounds if x["info"].get("waited_for_placeholder")]
        lines.append(
            f"first token, {kind} (n={len(rounds)}), p50 ms per step: {steps}; tokens evaluated p50 "
            f"{p50(evaluated) if evaluated else float('nan'):.0f}, their CPU p50 "
            f"{p50(cpu) * 1000 if cpu else float('nan'):.0f} ms; first text in the first message "
            f"(no placeholder before it) in {first} of {len(rounds)}; the first part came while the "
            f"placeholder was being sent in {len(waited)}"
            + (f", and waited for it p50 {p50(waited) * 1000:.1f} ms" if waited else "")
        )
    return lines


def table(r: dict) -> str:
    """The breakdown as a Markdown table, one column per kind of round (ms, p50)."""
    kinds = _kinds(r)
    names = [k for k in KINDS if k in kinds]
    columns = {k: dict(breakdown(kinds[k])) for k in names}
    lines = ["| step | " + " | ".join(f"{k} (n={len(kinds[k])})" for k in names) + " |"]
    lines.append("|---|" + "---:|" * len(names))
    for name, *_ in (*STEPS, ("total: Enter → first token in the owner's client",)):
        cells = []
        for k in names:
            v = columns[k].get(name, float("nan"))
            cells.append("" if v != v else f"{v * 1000:.1f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cold_table(r: dict) -> str:
    """The cold kinds' agent start, moment by moment: ms after the bridge's transaction (p50),
    then the CPU times of the load's parts and of the agent's process (p50, ms)."""
    kinds = _kinds(r)
    names = [k for k in KINDS if k.startswith("cold") and k in kinds]
    lines = ["| ms after the transaction | " + " | ".join(f"{k} (n={len(kinds[k])})" for k in names) + " |"]
    lines.append("|---|" + "---:|" * len(names))
    for label, stamp in COLD_MOMENTS:
        cells = []
        for k in names:
            values = [x["stamps"][stamp] - x["stamps"]["txn"] for x in kinds[k] if {stamp, "txn"} <= x["stamps"].keys()]
            cells.append(f"{p50(values) * 1000:.1f}" if values else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for label, key in COLD_CPU:
        cells = []
        for k in names:
            values = [x["info"][key] for x in kinds[k] if x["info"].get(key) is not None]
            cells.append(f"{p50(values) * 1000:.1f}" if values else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def main(quick: bool) -> None:  # python tests/bench/bench_first_token.py [--quick] [--no-ahead]
    import tempfile

    import aiohttp
    from common import start_homeserver

    with tempfile.TemporaryDirectory(prefix="bench-first-token-") as tmp:
        bench = await start_homeserver(Path(tmp) / "hs", quick)
        try:
            async with aiohttp.ClientSession() as http:
                owner = Owner(bench.url, http)
                await owner.login(bench.owner_id, bench.owner_password)
                owner.start_sync()
                try:
                    result = await run(bench, owner, ahead="--no-ahead" not in sys.argv)
                finally:
                    await owner.stop_sync()
        finally:
            await bench.server.stop()
    for row in rows(result):
        print(" | ".join(str(c) for c in row))
    for note in notes(result):
        print("-", note)
    print()
    print(table(result))
    print()
    print(cold_table(result))
    started = min(x["stamps"]["t0"] for x in result["rounds"])
    for x in result["rounds"]:
        print(x["kind"], x["token"], {k: round((v - started) * 1000, 1) for k, v in x["stamps"].items()}, x["info"])


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parents[2])
    asyncio.run(main("--quick" in sys.argv))
