"""Ids that sort by time, so that ORDER BY id is chronological order.

Layout (26 lowercase hex digits, fixed width so lexical order == numeric order):
  12 digits of milliseconds since the epoch (good until the year 10889),
   6 digits of a per-process counter, reset every millisecond,
   8 random digits, so that two processes never make the same id.
The counter keeps ids made in the same millisecond in order; if the clock goes
back, the last millisecond is reused so that ids never go backwards.
"""

import secrets
import threading
import time

_COUNTER_MAX = 0xFFFFFF

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_id() -> str:
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms, _counter = ms, 0
        elif _counter < _COUNTER_MAX:
            _counter += 1
        else:
            # 16M ids in one millisecond: borrow the next millisecond.
            _last_ms, _counter = _last_ms + 1, 0
        ms, counter = _last_ms, _counter
    return f"{ms:012x}{counter:06x}{secrets.randbits(32):08x}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000
