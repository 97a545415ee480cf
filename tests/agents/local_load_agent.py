"""The shipped local agent with its model's load held or crashed, for tests:

    python tests/agents/local_load_agent.py gate PATH [local_model options…]
    python tests/agents/local_load_agent.py crash CODE [local_model options…]

`acp.agents.local_model` unchanged but for the moment its model's file and context are opened
(`ChatModel._open`, in the background load that begins once `initialize` is answered, or in
whichever thread loads first): with `gate`, it says `gated load: waiting for PATH` on stderr and
goes on once PATH exists (a test sends a prompt meanwhile); with `crash`, it says
`the model's load crashed here (on purpose)` on stderr and the process ends at once with exit
code CODE, as a crash inside llama.cpp ends it; llama_cpp's import is skipped then, so that the
open comes as early as the agent lets it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from acp.agents import local_model, model  # noqa: E402

original_open = model.ChatModel._open


def gated(gate: Path):
    def open_model(self):
        print(f"gated load: waiting for {gate}", file=sys.stderr, flush=True)
        while not gate.exists():
            time.sleep(0.02)
        return original_open(self)

    return open_model


def crashing(code: int):
    def open_model(self):
        print("the model's load crashed here (on purpose)", file=sys.stderr, flush=True)
        os._exit(code)

    return open_model


if __name__ == "__main__":
    mode, value, *options = sys.argv[1:]
    if mode == "gate":
        model.ChatModel._open = gated(Path(value))  # type: ignore[method-assign]
    else:
        model.ChatModel._open = crashing(int(value))  # type: ignore[method-assign]
        model.ChatModel._import_llama_cpp = staticmethod(lambda: None)  # type: ignore[method-assign]
    local_model.main(options)
