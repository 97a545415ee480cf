"""The local agent (acp.agents.local_model, SmolLM2-135M): time to first token across sessions.

The agent runs as the bridge runs it, a subprocess spoken to over ACP on stdio, with
`--log-turns` so that each answer's prompt tokens (reused from the session's KV state, and
evaluated) are known. Time to first token (TTFT) = `session/prompt` written → first
agent_message_chunk read. Every session starts with a prompt of 1,000+ tokens of its own text
(no prefix shared with another session beyond the chat template's system prompt).
    (a) one session, 20 turns (the baseline: llama.cpp's prefix reuse in one context);
    (b) two sessions alternating, 10 rounds: every turn follows the other session's turn;
        compared with the turns of (a) at the same history length (its first 10);
        in a full run also with the states off (--kv-ram 0 --kv-disk 0: the old single context);
    (c) a new agent process: session/load, then a prompt, for the sessions of (a) and (b);
    (d) a fresh session whose first prompt carries the full context replay: 20 messages × 1,500
        characters (bridge.channels.turns.context.build_prompt), reported with its tokens and tokens/s;
    RSS of an agent holding 1, 4 and 16 such sessions (VmRSS), against its bound: --kv-ram plus the scratch of a prompt.
"""

from __future__ import annotations

import random
import re
import sys
import time
from pathlib import Path

from common import ROOT, p50, p99

sys.path.insert(0, str(ROOT / "tests" / "unit" / "acp" / "agents"))
from stdio_client import AgentProcess  # noqa: E402

from acp.agents.model import DEFAULT_KV_RAM_MIB  # noqa: E402

SCRATCH_MB = 40  # llama.cpp's compute buffers during a prompt of ~1,000 tokens, beside the states
from bridge.channels.turns.context import UnseenMessage, build_prompt  # noqa: E402

MAX_TOKENS = 24
TURN = re.compile(
    r"turn (\S+): prompt (\d+) tokens: (\d+) reused, (\d+) evaluated in ([\d.]+) s"
    r".*state from (\w+)"
)
WORDS = [
    "garden",
    "rose",
    "tulip",
    "apple",
    "tree",
    "soil",
    "water",
    "morning",
    "summer",
    "winter",
    "pruning",
    "wall",
    "path",
    "bench",
    "bird",
    "seed",
    "spade",
    "rain",
    "sun",
    "shade",
    "leaf",
    "root",
    "branch",
    "flower",
    "hedge",
    "pond",
    "frog",
    "moss",
    "stone",
    "gate",
    "market",
    "river",
    "bridge",
    "lantern",
    "kitchen",
    "window",
    "letter",
    "neighbour",
    "evening",
    "autumn",
    "harvest",
]
# Chat messages are denser than plain prose (names, numbers, code, links): about 4 characters a
# token, which makes the replay's 20 × 1500 characters ~7,500 tokens (docs/prepare.md "Figures").
DENSE = WORDS * 4 + [
    "rhododendron's",
    "14:30",
    "2026-12-03",
    "#garden",
    "@alice:localhost",
    "pH=6.5",
    "`mulch.py`",
    "re-pot",
    "(ericaceous)",
    "3×/week",
    "https://example.org/soil?x=1",
    "e.g.",
    "N-P-K",
    "~20cm",
    "Quercus-robur",
    "v0.3.36",
    "wasn't",
    "1,250g",
]
now = time.perf_counter


def text(seed: int, n_words: int, words: list[str] = WORDS) -> str:
    """Deterministic English-looking sentences, different for every seed."""
    rnd = random.Random(seed)
    out, sentence = [], []
    for _ in range(n_words):
        sentence.append(rnd.choice(words))
        if len(sentence) >= rnd.randint(6, 14):
            out.append(" ".join(sentence).capitalize() + ".")
            sentence = []
    return " ".join(out)


def primer(seed: int) -> str:
    return f"Notebook {seed}. " + text(seed, 900) + "\nWhat is this notebook about?"


class Agent:
    def __init__(self, sessions: Path, *extra: str):
        self.proc = AgentProcess(
            "--sessions", str(sessions), "--temperature", "0", "--max-tokens", str(MAX_TOKENS), "--log-turns", *extra
        )
        self.proc.initialize()
        self.lines = 0

    def new(self) -> str:
        return self.proc.new_session()

    def load(self, session: str) -> None:
        self.proc.call("session/load", {"sessionId": session, "cwd": "/", "mcpServers": []}, timeout=120)

    def ask(self, session: str, prompt: str) -> dict:
        """One turn: TTFT, and the agent's counters for it."""
        started = now()
        request = self.proc.start_request(
            "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": prompt}]}
        )
        first = None
        while True:
            message = self.proc.next_message(900)
            update = (message.get("params") or {}).get("update") or {}
            if first is None and update.get("sessionUpdate") == "agent_message_chunk":
                first = now() - started
            if message.get("id") == request and "method" not in message:
                break
        assert "error" not in message, message
        line = self._turn_line()
        return {"ttft": first if first is not None else now() - started, **line}

    def _turn_line(self) -> dict:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = [m for m in map(TURN.search, self.proc.stderr_lines) if m]
            if len(found) > self.lines:
                m = found[self.lines]
                self.lines += 1
                return {
                    "prompt": int(m[2]),
                    "reused": int(m[3]),
                    "evaluated": int(m[4]),
                    "seconds": float(m[5]),
                    "state": m[6],
                }
            time.sleep(0.02)
        raise AssertionError(f"no --log-turns line: {self.proc.stderr_lines[-3:]}")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def close(self) -> None:
        self.proc.close(timeout=30)


def wait_for(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def alternate(agent: Agent, seeds: tuple[int, int], rounds: int) -> tuple[list[str], list[dict], list[dict]]:
    sessions = [agent.new(), agent.new()]
    primes = [agent.ask(s, primer(seed)) for s, seed in zip(sessions, seeds)]
    turns = []
    for i in range(rounds):
        for s in sessions:
            turns.append(agent.ask(s, f"Question {i}: what about the {WORDS[i % len(WORDS)]}?"))
    return sessions, primes, turns


def run(folder: Path, quick: bool) -> dict:
    turns_a = 8 if quick else 20
    rounds_b = 4 if quick else 10
    replay = 5 if quick else 20
    rss_at = (1, 4) if quick else (1, 4, 16)
    out: dict = {"quick": quick, "turns_a": turns_a, "rounds_b": rounds_b, "replay": replay}
    sessions_dir = folder / "sessions"

    agent = Agent(sessions_dir)
    try:
        a = agent.new()
        out["a_prime"] = agent.ask(a, primer(1))
        out["a"] = [agent.ask(a, f"Question {i}: what about the {WORDS[i % len(WORDS)]}?") for i in range(turns_a)]
        b_sessions, out["b_prime"], out["b"] = alternate(agent, (2, 3), rounds_b)
    finally:
        agent.close()

    if not quick:  # the old behaviour, for the record: one context, no saved states
        old = Agent(folder / "no-states", "--kv-ram", "0", "--kv-disk", "0")
        try:
            _, _, out["b_off"] = alternate(old, (4, 5), 3)
        finally:
            old.close()

    again = Agent(sessions_dir)  # a restart
    try:
        out["c"] = []
        for i, session in enumerate([a] + b_sessions):
            started = now()
            again.load(session)
            turn = again.ask(session, f"After the restart, question {i}?")
            turn["from_load"] = now() - started
            out["c"].append(turn)
        fresh = again.new()
        lines = [
            UnseenMessage("user" if i % 2 == 0 else "alice", text(100 + i, 400, DENSE)[:1500]) for i in range(replay)
        ]
        prompt = build_prompt("garden", lines, "What was decided about the pond?")
        out["d"] = again.ask(fresh, prompt)
        out["d"]["chars"] = len(prompt)
        out["d_rss"] = again.rss_mb()
    finally:
        again.close()

    rss = Agent(folder / "rss")
    try:
        tiny = rss.new()
        rss.ask(tiny, "Hello")
        out["rss_base"] = rss.rss_mb()
        out["rss"] = {}
        sizes = []
        held = []
        for n in rss_at:
            while len(held) < n:
                session = rss.new()
                sizes.append(rss.ask(session, primer(200 + len(held)))["prompt"])
                held.append(session)
            # a state is copied out after its answer ended, then written: its file is the sign
            wait_for(lambda: all((folder / "rss" / f"{s}.kv").exists() for s in held))
            out["rss"][n] = rss.rss_mb()
        out["rss_min_tokens"] = min(sizes)
        reply, updates = rss.proc.prompt(tiny, "/model")
        out["model_text"] = "".join(
            u["update"]["content"]["text"] for u in updates if u["update"]["sessionUpdate"] == "agent_message_chunk"
        )
    finally:
        rss.close()
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _span(turns: list[dict]) -> str:
    return f"{min(t['prompt'] for t in turns)}–{max(t['prompt'] for t in turns)} tokens"


def rows(r: dict) -> list[tuple]:
    a = [t["ttft"] for t in r["a"]]
    a_same = [t["ttft"] for t in r["a"][: r["rounds_b"]]]  # the same history length as (b)
    b = [t["ttft"] for t in r["b"]]
    c = [t["ttft"] for t in r["c"]]
    base_b, base_c = p50(a_same), p50(a)
    out = [
        (
            "Local model",
            f"(a) one session, {len(a)} turns ({_span(r['a'])}): TTFT p50 / p99",
            f"{_ms(p50(a))} / {_ms(p99(a))}",
            "",
            "",
            "(info)",
            None,
        ),
        (
            "Local model",
            f"(b) two sessions alternating, {r['rounds_b']} rounds ({_span(r['b'])}): TTFT p50 / p99",
            f"{_ms(p50(b))} / {_ms(p99(b))}",
            f"{_ms(base_b)} ((a), first {r['rounds_b']} turns)",
            f"{p50(b) / base_b:.2f}×",
            "≤ 1.5×",
            p50(b) / base_b <= 1.5,
        ),
    ]
    if "b_off" in r:
        off = [t["ttft"] for t in r["b_off"]]
        out.append(
            (
                "Local model",
                "(b) the same with the states off (one context for all, as before)",
                f"{_ms(p50(off))} / {_ms(p99(off))}",
                f"{_ms(base_b)}",
                f"{p50(off) / base_b:.1f}×",
                "(info)",
                None,
            )
        )
    out += [
        (
            "Local model",
            f"(c) after a restart, session/load then prompt ({len(c)} sessions): TTFT p50",
            _ms(p50(c)),
            f"{_ms(base_c)} ((a) p50)",
            f"{p50(c) / base_c:.2f}×",
            "≤ 2×",
            p50(c) / base_c <= 2,
        ),
        (
            "Local model",
            "(c) session/load sent → first token (model load included) p50",
            _ms(p50([t["from_load"] for t in r["c"]])),
            "",
            "",
            "(info)",
            None,
        ),
        (
            "Local model",
            f"(d) fresh session, first prompt with {r['replay']} × 1,500 characters: TTFT",
            _ms(r["d"]["ttft"]),
            "",
            "",
            "(info)",
            None,
        ),
    ]
    # docs/performance.md "The local agent" states the bound: the states held (at most --kv-ram)
    # plus llama.cpp's scratch of a prompt (~20 MB for the ~1,100-token prompts here, measured with
    # one session; ~110 MB for 7,000+ tokens)
    bound = DEFAULT_KV_RAM_MIB * 1.048576 + SCRATCH_MB  # MiB → MB
    for n, mb in r["rss"].items():
        out.append(
            (
                "Local model",
                f"agent RSS, {n} session{'s' if n > 1 else ''} of ≥ {r['rss_min_tokens']} tokens",
                f"{mb:.0f} MB",
                f"{r['rss_base']:.0f} MB (model loaded, one tiny session)",
                f"+{mb - r['rss_base']:.0f} MB",
                f"≤ +{bound:.0f} MB (--kv-ram + {SCRATCH_MB} MB scratch)",
                mb - r["rss_base"] <= bound,
            )
        )
    if 16 not in r["rss"]:
        out.append(("Local model", "agent RSS, 16 sessions", "skipped (--quick)", "", "", "", None))
    return out


def notes(r: dict) -> list[str]:
    def counts(turns: list[dict]) -> str:
        return (
            f"evaluated p50 {p50([t['evaluated'] for t in turns]):.0f} tokens of "
            f"p50 {p50([t['prompt'] for t in turns]):.0f}; states from "
            + ", ".join(sorted({t["state"] for t in turns}))
        )

    d = r["d"]
    rate = d["evaluated"] / d["seconds"] if d["seconds"] else 0
    out = [
        f"local model: first prompts of 1,000+ tokens: "
        f"{', '.join(str(t['prompt']) for t in [r['a_prime'], *r['b_prime']])} tokens, evaluated at "
        f"{p50([t['evaluated'] / t['seconds'] for t in [r['a_prime'], *r['b_prime']]]):.0f} tokens/s",
        f"local model (a): {counts(r['a'])}; (b): {counts(r['b'])}; (c): {counts(r['c'])}",
        f"local model (d): {d['chars']} characters → {d['prompt']} prompt tokens, {d['evaluated']} "
        f"evaluated in {d['seconds']:.1f} s ({rate:.0f} tokens/s); agent RSS after it {r['d_rss']:.0f} MB",
        "local model /model after the RSS run: " + r["model_text"].splitlines()[-1],
    ]
    if "b_off" in r:
        out.insert(2, f"local model (b) states off: {counts(r['b_off'])}")
    return out


if __name__ == "__main__":  # python tests/bench/bench_model.py [--quick]: this benchmark alone
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-model-") as tmp:
        result = run(Path(tmp), "--quick" in sys.argv)
    for row in rows(result):
        print(" | ".join(str(c) for c in row))
    for note in notes(result):
        print("-", note)
