"""Saved KV states of the local agent's sessions: a bounded LRU in memory, and files on disk.

The model holds one llama.cpp context; the session whose turn it is has its KV cache there.
After each turn the model copies that session's state out (`llama_state_seq_get_data`: the
evaluated tokens' keys and values, about 22 KiB a token for SmolLM2-135M) and hands it here, so
the next turn of any session restores its own state and evaluates only what is new.

* Memory: at most `ram_bytes` of states, least recently used evicted first.
* Disk: each state is also written, in a background thread, next to the session's JSON file
  (`<session id>.kv`, mode 0600 in the 0700 sessions folder, written to a temporary file and
  renamed), so a `session/load` after a restart restores it instead of evaluating the history.
  At most `disk_bytes` of state files are kept; the least recently written are deleted first.
* One more state is shared by every session: the prompt's known start before the owner's
  first text (the system part and the first user header), `prefix.kv` in the same folder,
  made for the same key plus what the prefix depends on (`put_prefix`, `take_prefix`;
  docs/performance.md "The local agent's first token").
* A state file counts only if it was made for the same model file, context size and state
  format (`StateKey`) and its bytes are intact (CRC32); anything else is ignored, and the
  session's history is evaluated again, silently.

Nothing here imports llama_cpp: states are opaque bytes with their token ids.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from .atomic_file import replacing

MAGIC = b"SKKV\x01\n"
SUFFIX = ".kv"
PREFIX = "prefix"  # the shared prefix's state file is prefix.kv (session ids start with "sess_")
_LEN = struct.Struct("<I")


class Cut(NamedTuple):
    """Where a session's prompt begins in its history: the first message kept and, when that
    message alone is longer than the window, how many of its characters were left out."""

    first: int
    head: int = 0


@dataclass
class SavedState:
    """One session's KV state: the evaluated token ids and llama.cpp's sequence bytes."""

    tokens: list[int]
    blob: bytes | bytearray
    first: int = 0  # index of the first history message the tokens start with (the cut)
    head: int = 0  # characters cut from the start of that message (an overlong last message)

    @property
    def cut(self) -> Cut:
        return Cut(self.first, self.head)

    @property
    def size(self) -> int:
        return len(self.blob) + 4 * len(self.tokens)


def model_fingerprint(path: Path) -> dict[str, Any]:
    """What identifies a model file cheaply: name, size, mtime and a hash of its first MiB."""
    stat = path.stat()
    with open(path, "rb") as f:
        head = hashlib.sha256(f.read(1 << 20)).hexdigest()
    return {"name": path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "head": head}


def write_state(path: Path, key: dict[str, Any], state: SavedState) -> None:
    """Write atomically (temporary file in the same folder, then rename), mode 0600."""
    header = json.dumps(
        {
            "key": key,
            "first": state.first,
            "head": state.head,
            "n_tokens": len(state.tokens),
            "n_bytes": len(state.blob),
            "crc32": zlib.crc32(state.blob),
        },
        sort_keys=True,
    ).encode()
    with replacing(path, binary=True) as f:
        f.write(MAGIC)
        f.write(_LEN.pack(len(header)))
        f.write(header)
        f.write(struct.pack(f"<{len(state.tokens)}i", *state.tokens))
        f.write(state.blob)


def read_header(f, key: dict[str, Any] | None) -> dict[str, Any] | None:
    """The header of a state file made for `key` (None: for any key), or None."""
    if f.read(len(MAGIC)) != MAGIC:
        return None
    raw = f.read(_LEN.size)
    if len(raw) != _LEN.size:
        return None
    (length,) = _LEN.unpack(raw)
    if length > 1 << 16:
        return None
    try:
        header = json.loads(f.read(length))
    except ValueError:
        return None
    if not isinstance(header, dict) or (key is not None and header.get("key") != key):
        return None
    if not all(isinstance(header.get(k), int) and header[k] >= 0 for k in ("first", "n_tokens", "n_bytes", "crc32")):
        return None
    if not isinstance(header.setdefault("head", 0), int) or header["head"] < 0:
        return None
    return header


def read_state(path: Path, key: dict[str, Any]) -> SavedState | None:
    """The state in `path` if it is whole and made for `key`; None otherwise (never raises
    for a missing, foreign, damaged or truncated file)."""
    found = read_keyed(path, key)
    return None if found is None else found[1]


def read_keyed(path: Path, key: dict[str, Any] | None = None) -> tuple[Any, SavedState] | None:
    """(the key it was made for, the state) if the file in `path` is whole, and made for `key`
    unless `key` is None: a state read before its model is loaded, its key compared once it is
    (`StateCache.adopt`)."""
    try:
        with open(path, "rb") as f:
            header = read_header(f, key)
            if header is None:
                return None
            n = header["n_tokens"]
            raw = f.read(4 * n)
            blob = bytearray(header["n_bytes"])
            got = f.readinto(blob)
            if len(raw) != 4 * n or got != len(blob) or f.read(1):
                return None
    except OSError:
        return None
    if zlib.crc32(blob) != header["crc32"]:
        return None
    state = SavedState(tokens=list(struct.unpack(f"<{n}i", raw)), blob=blob, first=header["first"], head=header["head"])
    return header["key"], state


def read_cut(path: Path, key: dict[str, Any]) -> Cut | None:
    """Only the header's cut (`first` and `head`: where the state's prompt began), or None."""
    try:
        with open(path, "rb") as f:
            header = read_header(f, key)
    except OSError:
        return None
    return None if header is None else Cut(header["first"], header["head"])


class StateCache:
    """Sessions' saved states: `ram_bytes` in memory (LRU), `disk_bytes` of files in `directory`.

    Thread-safe: the model's generation thread puts and takes states, the agent's
    event loop forgets them, a writer thread writes files.
    """

    def __init__(self, directory: Path | None, key: dict[str, Any], *, ram_bytes: int, disk_bytes: int) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.key = key
        self.ram_bytes = max(0, ram_bytes)
        self.disk_bytes = max(0, disk_bytes) if directory is not None else 0
        self._ram: OrderedDict[str, SavedState] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[str, SavedState] = {}  # to be written, newest per session
        self._keys: dict[str, dict[str, Any]] = {}  # a pending state's key, if not self.key
        self._prefix: tuple[dict[str, Any], SavedState] | None = None  # (its extra key, state)
        self._wake = threading.Condition(self._lock)
        self._writing: str | None = None
        self._writer: threading.Thread | None = None
        self._closed = False
        self.written = 0  # files written since start (tests and benchmarks read these)
        self.evicted = 0
        if self.disk_bytes:
            self._remove_stale_temporaries()

    # -- memory ---------------------------------------------------------------
    @property
    def resident_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._ram.values())

    def resident(self) -> list[str]:
        """Session ids held in memory, least recently used first."""
        with self._lock:
            return list(self._ram)

    def _keep(self, session_id: str, state: SavedState) -> None:
        """Under the lock: `state` becomes the newest in memory; the oldest go past the bound."""
        self._ram.pop(session_id, None)
        if state.size > self.ram_bytes:
            return
        self._ram[session_id] = state
        total = sum(s.size for s in self._ram.values())
        while total > self.ram_bytes and self._ram:
            _, old = self._ram.popitem(last=False)
            total -= old.size
            self.evicted += 1

    # -- the model's side ---------------------------------------------------------
    def put(self, session_id: str, state: SavedState) -> None:
        """The session's newest state: kept in memory, and written to disk soon."""
        with self._lock:
            self._keep(session_id, state)
            if self.disk_bytes and state.size <= self.disk_bytes:
                self._pending[session_id] = state
                self._start_writer()
                self._wake.notify_all()

    def take(self, session_id: str) -> tuple[SavedState | None, str]:
        """(state, where it came from: "memory" | "disk" | "none")."""
        with self._lock:
            state = self._ram.get(session_id) or self._pending.get(session_id)
            if state is not None:
                self._ram.pop(session_id, None)
                self._keep(session_id, state)
                return state, "memory"
        state = self._read(session_id)
        if state is None:
            return None, "none"
        with self._lock:
            if session_id not in self._ram:
                self._keep(session_id, state)
        return state, "disk"

    def cut(self, session_id: str) -> Cut | None:
        """The cut of the session's saved state (see SavedState.cut), or None if none."""
        with self._lock:
            state = self._ram.get(session_id) or self._pending.get(session_id)
            if state is not None:
                return state.cut
        path = self._path(session_id)
        return read_cut(path, self.key) if path is not None else None

    def prefetch(self, session_id: str) -> bool:
        """Read the session's state file into memory now (before its prompt arrives)."""
        with self._lock:
            if session_id in self._ram or session_id in self._pending:
                return True
        state = self._read(session_id)
        if state is None:
            return False
        with self._lock:
            if session_id not in self._ram:
                self._keep(session_id, state)
        return True

    def adopt(self, session_id: str, key: Any, state: SavedState) -> bool:
        """Keep a state read from the session's file before this cache existed (while the model
        loaded), if it was made for this cache's key; False if not (the file is read again
        when the session wants it, and found foreign then)."""
        if key != self.key:
            return False
        with self._lock:
            if session_id not in self._ram and session_id not in self._pending:
                self._keep(session_id, state)
        return True

    # -- the shared prefix -------------------------------------------------------
    def prefix_key(self, extra: dict[str, Any]) -> dict[str, Any]:
        """The prefix state's key: this cache's (model, context, template) and `extra` (what
        the prefix's tokens depend on besides: the system prompt, the tokens themselves)."""
        return {**self.key, "prefix": extra}

    def keeps_prefix(self) -> bool:
        return bool(self.ram_bytes or self.disk_bytes)

    def put_prefix(self, extra: dict[str, Any], state: SavedState) -> None:
        """The shared prefix's state: kept in memory (outside the sessions' LRU), written soon."""
        with self._lock:
            self._prefix = (extra, state) if state.size <= self.ram_bytes else None
            if self.disk_bytes and state.size <= self.disk_bytes:
                self._pending[PREFIX] = state
                self._keys[PREFIX] = self.prefix_key(extra)
                self._start_writer()
                self._wake.notify_all()

    def take_prefix(self, extra: dict[str, Any]) -> tuple[SavedState | None, str]:
        """(the prefix state made for `extra`, "memory" | "disk" | "none"); a state made for
        another model, context, template or system prompt is never returned."""
        with self._lock:
            if self._prefix is not None and self._prefix[0] == extra:
                return self._prefix[1], "memory"
        path = self._path(PREFIX)
        state = read_state(path, self.prefix_key(extra)) if path is not None else None
        if state is None:
            return None, "none"
        with self._lock:
            if state.size <= self.ram_bytes:
                self._prefix = (extra, state)
        return state, "disk"

    def forget(self, session_id: str) -> None:
        """Drop the session's state everywhere (its history was cleared)."""
        with self._lock:
            self._ram.pop(session_id, None)
            self._pending.pop(session_id, None)
            while self._writing == session_id:
                self._wake.wait(0.1)
            path = self._path(session_id)
        if path is not None:
            try:
                path.unlink()
            except OSError:
                pass

    # -- disk -------------------------------------------------------------------
    def _path(self, session_id: str) -> Path | None:
        if self.directory is None or not self.disk_bytes:
            return None
        return self.directory / f"{session_id}{SUFFIX}"

    def _read(self, session_id: str) -> SavedState | None:
        path = self._path(session_id)
        return read_state(path, self.key) if path is not None else None

    def _start_writer(self) -> None:
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="kv-writer", daemon=True)
            self._writer.start()

    def _write_loop(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._wake.wait()
                if not self._pending:
                    return
                session_id = next(iter(self._pending))
                state = self._pending.pop(session_id)
                key = self._keys.pop(session_id, self.key)
                self._writing = session_id
            try:
                path = self._path(session_id)
                assert path is not None
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                write_state(path, key, state)
                self.written += 1
                self._bound_disk(keep=path)
            except OSError as exc:
                print(f"sidekicks-local: cannot save the KV state of {session_id}: {exc}", flush=True, file=sys.stderr)
            finally:
                with self._lock:
                    self._writing = None
                    self._wake.notify_all()

    def _state_files(self) -> Iterable[tuple[float, int, Path]]:
        assert self.directory is not None
        for path in self.directory.glob(f"*{SUFFIX}"):
            if path.name.startswith(".tmp-"):
                continue
            try:
                stat = path.stat()
            except OSError:
                continue
            yield stat.st_mtime, stat.st_size, path

    def _bound_disk(self, keep: Path) -> None:
        files = sorted(self._state_files())
        total = sum(size for _, size, _ in files)
        for _, size, path in files:
            if total <= self.disk_bytes:
                break
            if path == keep or path.name == PREFIX + SUFFIX:  # the shared prefix (~1 MiB) stays
                continue
            try:
                path.unlink()
                total -= size
            except OSError:
                pass

    def _remove_stale_temporaries(self) -> None:
        """Half-written files of an agent killed while it wrote."""
        if self.directory is None or not self.directory.is_dir():
            return
        for path in self.directory.glob(f".tmp-*{SUFFIX}"):
            try:
                path.unlink()
            except OSError:
                pass

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every pending state is written (True) or `timeout` passes (False)."""
        with self._lock:
            return self._wake.wait_for(lambda: not self._pending and self._writing is None, timeout)

    def close(self, timeout: float | None = 5.0) -> None:
        self.flush(timeout)
        with self._lock:
            self._closed = True
            self._wake.notify_all()
