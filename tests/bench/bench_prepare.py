"""Prepare ahead (docs/prepare.md): the local agent's first token after a question in a channel
with a full unseen history (20 messages × 1,500 characters, docs/architecture.md "What each agent
reads"), with and without `_sidekicks/prepare`.

The agent runs as the bridge runs it (acp.agents.local_model over stdio, `--log-turns`). The
prompt is the bridge's own (bridge.channels.turns.context.build_prompt); the prepared text is that
prompt without its question, as bridge/channels/turns/prepare.py hands it.
    (a) without: a fresh session is asked at once (every token evaluated then);
    (b) with: a session that had a short exchange first ("say hello", as a channel's first
        question to its local agent) is prepared, the question comes once the preparation ended
        (the question coming at least the preparation time after the history): the history is
        longer than the window's room, so this is the cut the preparation and the question must
        share (docs/prepare.md "The cut");
    (c) warm: a follow-up question in that session (the floor (b) is compared with);
    the CPU a preparation costs (utime + stime of the agent process while it runs, idle
    otherwise), and its wall time.
TTFT = `session/prompt` written → first agent_message_chunk read. One round per side, (a) and
(b) on separate fresh sessions of one agent, taking turns with --quick's smaller history too.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

from common import ROOT

sys.path.insert(0, str(ROOT / "tests" / "bench"))
from bench_model import DENSE, Agent, text  # noqa: E402

from acp.agents.local_model import PREPARE_METHOD  # noqa: E402
from bridge.channels.turns.context import UnseenMessage, build_prompt  # noqa: E402

PREPARED = re.compile(
    r"(\S+): prepare (\w+): (\d+) tokens known, (\d+) reused, (\d+) evaluated "
    r"in ([\d.]+) s"
)
QUESTION = "@local what was decided about the pond?"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def prepare(agent: Agent, session: str, known: str) -> dict:
    pid = agent.proc.proc.pid
    before_cpu, started = cpu_seconds(pid), time.perf_counter()
    seen = len([m for m in map(PREPARED.search, agent.proc.stderr_lines) if m])
    reply = agent.proc.call(PREPARE_METHOD, {"sessionId": session, "prompt": [{"type": "text", "text": known}]})
    assert reply == {"outcome": "started"}, reply
    deadline = time.monotonic() + 1800
    while True:
        found = [m for m in map(PREPARED.search, agent.proc.stderr_lines) if m]
        if len(found) > seen:
            m = found[seen]
            break
        if time.monotonic() > deadline:
            raise AssertionError("no prepare line")
        time.sleep(0.05)
    return {
        "outcome": m[2],
        "tokens": int(m[3]),
        "evaluated": int(m[5]),
        "seconds": float(m[6]),
        "wall": time.perf_counter() - started,
        "cpu": cpu_seconds(pid) - before_cpu,
    }


def run(folder: Path, quick: bool, ctx: int | None = None) -> dict:
    """`ctx`: the agent's window (`--ctx`); a window smaller than the history makes the cut
    that the preparation and the question must share (docs/prepare.md "The cut")."""
    replay = 5 if quick else 20

    def history(seed: int) -> str:
        lines = [
            UnseenMessage("user" if i % 2 == 0 else "alice", text(seed + i, 400, DENSE)[:1500]) for i in range(replay)
        ]
        return build_prompt("garden", lines, "")

    # two histories of the same size: llama.cpp reuses any matching prefix in its context,
    # so the prepared side must not find the unprepared side's tokens there
    unprepared, known = history(100), history(300)
    out: dict = {"replay": replay, "chars": len(known) + len(QUESTION), "ctx": ctx}
    agent = Agent(folder / "prepare", *(("--ctx", str(ctx)) if ctx else ()))
    try:
        agent.ask(agent.new(), "Hello")  # the model is loaded: neither side pays for it
        out["a"] = agent.ask(agent.new(), unprepared + QUESTION)
        session = agent.new()
        agent.ask(session, "say hello")
        out["prep"] = prepare(agent, session, known)
        out["b"] = agent.ask(session, known + QUESTION)
        out["c"] = agent.ask(session, "And the bench by the wall?")
        pid = agent.proc.proc.pid
        idle_before, idle_started = cpu_seconds(pid), time.perf_counter()
        time.sleep(5)
        out["idle_cpu"] = (cpu_seconds(pid) - idle_before) / (time.perf_counter() - idle_started)
    finally:
        agent.close()
    print(json.dumps(out), flush=True)  # the raw figures, whatever happens to the table
    return out


def rows(r: dict) -> list[tuple]:
    a, b, c, prep = r["a"], r["b"], r["c"], r["prep"]
    what = f"{r['replay']} × 1,500 characters" + (f", --ctx {r['ctx']}" if r.get("ctx") else "")
    full = r["replay"] == 20
    return [
        (
            "Prepare",
            f"first question after {what}, prepared: TTFT (baseline: not prepared)",
            f"{b['ttft']:.2f} s",
            f"{a['ttft']:.2f} s",
            f"{b['ttft'] / a['ttft']:.3f}×",
            "≤ 10 s" if full else "(info)",
            b["ttft"] <= 10 if full else None,
        ),
        (
            "Prepare",
            "… prepared vs a warm follow-up in the same session",
            f"{b['ttft']:.2f} s",
            f"{c['ttft']:.2f} s",
            f"{b['ttft'] / c['ttft']:.2f}×",
            "≤ 1.1×",
            b["ttft"] / c["ttft"] <= 1.1,
        ),
        (
            "Prepare",
            f"the preparation ({prep['tokens']} tokens): wall (baseline: CPU time)",
            f"{prep['wall']:.1f} s",
            f"{prep['cpu']:.1f} CPU s",
            "",
            "(info)",
            None,
        ),
    ]


def notes(r: dict) -> list[str]:
    a, b, prep = r["a"], r["b"], r["prep"]
    return [
        f"Prepare: without, the question evaluated {a['evaluated']} of {a['prompt']} tokens; "
        f"with, {b['evaluated']} (reused {b['reused']}); the preparation {prep['outcome']}, "
        f"{prep['evaluated']} tokens in {prep['seconds']:.1f} s; the agent idle after: "
        f"{100 * r['idle_cpu']:.1f} % of a core."
    ]


if __name__ == "__main__":
    import tempfile

    quick = "--quick" in sys.argv
    ctx = int(sys.argv[sys.argv.index("--ctx") + 1]) if "--ctx" in sys.argv else None
    with tempfile.TemporaryDirectory(prefix="sidekicks-bench-prepare-") as tmp:
        result = run(Path(tmp), quick, ctx)
    for row in rows(result):
        print(" | ".join(str(cell) for cell in row))
    for note in notes(result):
        print(note)
