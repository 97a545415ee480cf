"""The slot pool: at most N agent processes, turns taken one at a time per agent.

* A turn is exclusive use of one agent; callers queue FIFO per agent
  (asyncio.Lock hands itself over in FIFO order and does not let newcomers
  barge past waiters).
* Starting an agent needs a slot. With every slot used, the least recently
  used *idle* agent is stopped; an agent in a turn, starting, or with callers
  queued for it is never chosen. If none is idle, the caller waits.
* A process that dies is forgotten at once (on_stopped), freeing its slot;
  the next turn starts it again.

All bookkeeping below runs without awaits between check and change, which is
what makes it safe on one event loop without extra locks.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from .client import Agent, AgentSpec, OnCommands, OnState, start_agent
from .errors import AcpError

log = logging.getLogger(__name__)


class _Entry:
    def __init__(self, spec: AgentSpec):
        self.spec = spec
        self.agent: Agent | None = None
        self.turn_lock = asyncio.Lock()
        self.start_lock = asyncio.Lock()
        self.in_turn = False
        self.queued = 0  # callers waiting for a turn
        self.getting = 0  # get() calls in progress (pins the agent)
        self.starting = False  # holds a slot while the process starts
        self.stopping = False  # holds a slot while the process is being stopped
        self.waiting_slot = False
        self.last_used = 0

    @property
    def running(self) -> bool:
        return self.agent is not None and self.agent.returncode is None

    @property
    def holds_slot(self) -> bool:
        return self.running or self.starting or self.stopping

    @property
    def evictable(self) -> bool:
        return (
            self.running
            and not self.in_turn
            and not self.starting
            and not self.stopping
            and self.queued == 0
            and self.getting == 0
            and not self.turn_lock.locked()
        )


class Pool:
    def __init__(
        self,
        specs: dict[str, AgentSpec],
        agents_in_memory: int = 2,
        on_commands: OnCommands | None = None,
        on_stopped: Callable[[str], Any] | None = None,
        client_capabilities: dict[str, Any] | None = None,
        on_state: OnState | None = None,
    ):
        if agents_in_memory < 1:
            raise ValueError("agents_in_memory must be at least 1")
        self.capacity = agents_in_memory
        self.on_commands, self.on_stopped = on_commands, on_stopped
        self.client_capabilities = client_capabilities
        self.on_state = on_state
        self._entries = {name: _Entry(spec) for name, spec in specs.items()}
        self._clock = itertools.count(1)  # LRU order without wall-clock ties
        self._slot_waiters: list[asyncio.Future] = []
        self._closed = False

    def _entry(self, name: str) -> _Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"unknown agent: {name}") from None

    def state(self, name: str) -> str:
        """'stopped' | 'starting' | 'ready' | 'busy' | 'waiting'."""
        e = self._entry(name)
        if e.starting:
            return "starting"
        if e.running:
            return "busy" if e.in_turn else "ready"
        if e.in_turn or e.queued or e.waiting_slot:
            return "waiting"
        return "stopped"

    def agent(self, name: str) -> Agent | None:
        """The running agent, if any, without starting it."""
        e = self._entry(name)
        return e.agent if e.running else None

    # -- public operations ---------------------------------------------------
    @asynccontextmanager
    async def turn(self, name: str) -> AsyncIterator[Agent]:
        e = self._entry(name)
        e.queued += 1
        try:
            await e.turn_lock.acquire()
        finally:
            e.queued -= 1
        try:
            e.in_turn = True
            agent = await self._ensure_running(e)
            e.last_used = next(self._clock)
            yield agent
        finally:
            e.in_turn = False
            e.last_used = next(self._clock)
            e.turn_lock.release()
            self._wake()  # this agent may now be evicted for a waiter

    async def get(self, name: str) -> Agent:
        e = self._entry(name)
        e.getting += 1
        try:
            agent = await self._ensure_running(e)
            e.last_used = next(self._clock)
            return agent
        finally:
            e.getting -= 1
            self._wake()

    async def stop(self, name: str) -> None:
        e = self._entry(name)
        if e.agent is not None:
            await self._stop_entry(e)

    def add(self, name: str, spec: AgentSpec) -> None:
        """An agent configured while the pool runs (the bot's `!agents add`)."""
        if name not in self._entries:
            self._entries[name] = _Entry(spec)

    async def remove(self, name: str) -> None:
        """An agent taken out of the config: its process stopped, its entry gone."""
        e = self._entries.get(name)
        if e is not None:
            await self._stop_entry(e)
            del self._entries[name]

    async def close(self) -> None:
        self._closed = True
        await asyncio.gather(*(self._stop_entry(e) for e in self._entries.values() if e.agent), return_exceptions=True)
        for waiter in self._slot_waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- internals -------------------------------------------------------------
    async def _ensure_running(self, e: _Entry) -> Agent:
        async with e.start_lock:
            if e.running:
                return e.agent  # type: ignore[return-value]
            if e.agent is not None:  # died since; its exit hook may not have run yet
                self._forget(e, e.agent)
            if self._closed:
                raise AcpError("the agent pool is closed")
            await self._take_slot(e)
            try:
                agent = await start_agent(e.spec, self.on_commands, self.client_capabilities, self.on_state)
            finally:
                e.starting = False
                self._wake()
            agent.on_exit = self._exited
            e.agent = agent
            if agent.returncode is not None:  # died right after initialize
                self._forget(e, agent)
            return agent

    async def _take_slot(self, e: _Entry) -> None:
        """Reserve a slot for `e` (sets e.starting), evicting or waiting as needed."""
        while True:
            if self._closed:
                raise AcpError("the agent pool is closed")
            used = sum(1 for other in self._entries.values() if other.holds_slot)
            if used < self.capacity:
                e.starting, e.waiting_slot = True, False
                return
            idle = [o for o in self._entries.values() if o is not e and o.evictable]
            if idle:
                victim = min(idle, key=lambda o: o.last_used)
                e.starting, e.waiting_slot = True, False
                log.info("stopping %s (least recently used) to make room for %s", victim.spec.name, e.spec.name)
                await self._stop_entry(victim)
                return
            e.waiting_slot = True
            waiter = asyncio.get_running_loop().create_future()
            self._slot_waiters.append(waiter)
            try:
                await waiter
            finally:
                e.waiting_slot = False
                if waiter in self._slot_waiters:
                    self._slot_waiters.remove(waiter)

    def _wake(self) -> None:
        # Every waiter re-checks in FIFO order; the first to fit takes the slot.
        waiters, self._slot_waiters = self._slot_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _stop_entry(self, e: _Entry) -> None:
        agent = e.agent
        if agent is None:
            return
        e.agent, e.stopping = None, True  # keeps the slot counted until really gone
        try:
            await agent.stop()
        except Exception:
            log.exception("%s: error while stopping", e.spec.name)
        finally:
            e.stopping = False
            self._notify_stopped(e.spec.name)
            self._wake()

    def _forget(self, e: _Entry, agent: Agent) -> None:
        if e.agent is agent:
            e.agent = None
            self._notify_stopped(e.spec.name)
            self._wake()

    def _exited(self, agent: Agent) -> None:
        e = self._entries.get(agent.name)
        if e is not None:
            self._forget(e, agent)

    def _notify_stopped(self, name: str) -> None:
        if self.on_stopped is None:
            return
        try:
            outcome = self.on_stopped(name)
            if inspect.isawaitable(outcome):
                asyncio.ensure_future(outcome)
        except Exception:
            log.exception("on_stopped callback failed for %s", name)
