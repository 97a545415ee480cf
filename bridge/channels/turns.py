"""One turn: one agent answering one message in one channel
(docs/architecture.md "What each agent reads", "Slots and sessions",
"Streaming, permissions and cancel").

Picks up the agent's session (kept, loaded or fresh), tells it what it has not seen, streams its
answer into an `Answer`, and stores the answer once it is finished — never while it streams.
This is the turn's life: its record's states (journal.py), its place in the agent's queue, its
prompt, its stop and its end. What the owner sees while the agent works (status line, typing,
plan and tool calls, the parts of the answer) is showing.py's.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp

from acp import AcpError, AgentCrashed, AgentTimeout, Update
from store import StoreError, TurnRecord, keys
from store.turns import DROPPED, ENDED, INTERRUPTED

from ..matrix.client import MatrixError
from ..matrix.markdown import escape_html
from ..matrix.puppet import relating
from ..voice.spoken import speak_answer
from . import prepare
from .agent_files import roots_for
from .approvals import approve_mode, approvers
from .context import UnseenMessage, build_prompt
from .conversations import relation_for
from .journal import Journal
from .prompt import attachment_prompt, listening
from .routing import Turn
from .sessions import record_use
from .showing import Showing
from .stream import Answer, AnswerNotFinished, TxnIds

if TYPE_CHECKING:
    from store import Channel

    from .incoming import Incoming
    from .notices import Notices
    from .parts import ChannelParts, WorkShown
    from .registry import Channels

log = logging.getLogger(__name__)

PAUSED = "⏸ the bridge stopped before this answer began: it is answered when the bridge is back"
PLACEHOLDER_GRACE = 0.15  # seconds a running agent has to answer before "getting ready" shows
STDERR_LINES = 12  # lines of a crashed agent's stderr shown in its notice
FAILED_FINISH_TIMEOUT = 20  # seconds to mark an answer interrupted after a failure of the bridge
FINISH_ON_STOP = 5  # seconds a stopping bridge gives an answer the agent has finished


class Portal(Protocol):
    """The channel a turn runs in, as the turn sees it (portal.Portal runs it)."""

    parts: ChannelParts
    channel: Channel
    runs: dict[str, TurnRun]  # conversation → its running turn
    room_id: str

    def member_names(self) -> list[str]: ...

    def note_queue(self, conversation: str) -> None: ...

    def pending(self, conversation: str | None = None) -> int: ...

    async def session_with(
        self, agent_name: str, agent: Any, also: Any = None, conversation: str = ""
    ) -> tuple[str, bool, Any]: ...


class TurnRun:
    """A turn in progress, so `!stop`, a redaction or 🛑 can cancel it."""

    def __init__(self, portal: Portal, agent_name: str, answer: Answer):
        self.portal = portal
        self.agent_name = agent_name
        self.answer = answer
        self.agent = None
        self.session_id: str | None = None
        self.session_dir: str | None = None  # where its session works: the files it may post
        self.prompt_event_id: str | None = None
        self.cancelled = False
        self.tool_calls: dict[str, dict] = {}  # toolCallId → what the agent said of it so far
        self.work: WorkShown | None = None  # its plan and tool calls as messages (coding/work.py)
        self.entering: asyncio.Future | None = None  # waiting for the agent (busy elsewhere)
        self.prompt_sent = False  # session/prompt is written to the agent (store/turns.py)
        self.journal: Journal | None = None  # what it writes into its turn record
        self.conversation = ""  # its record's: "" the main timeline, else the thread's root
        self.steering: list[str] = []  # what `!steer` (or a reply to the answer) adds, not yet asked
        self.steerable = True  # False once its agent is done: too late to steer it
        self.stop_line: str | None = None  # why it was cancelled, when not by the owner (budgets.py)

    def note_tool_call(self, update: Update) -> dict:
        """Remember a tool call's title, kind, input and locations (updates carry only changes)."""
        known = self.tool_calls.setdefault(update.tool_call_id or "", {})
        for key in ("title", "kind", "rawInput", "locations"):
            if update.raw.get(key) not in (None, "", [], {}):
                known[key] = update.raw[key]
        return known

    async def steer(self, text: str) -> bool:
        """Steer the turn (docs/sessions.md): the agent is asked again, in this answer and this
        turn, what it had been asked plus `text` — its running prompt cancelled first
        (`session/cancel`), a prompt not yet written gets `text` at once. False: too late, the
        agent has finished."""
        if not self.steerable:
            return False
        self.steering.append(text)
        if self.prompt_sent:
            await self.cancel()
        return True

    async def cancel(self) -> None:
        self.cancelled = True
        busy_in = self.portal.parts.channels.active_turns.get(self.agent_name)
        if self.entering is not None and not self.entering.done() and busy_in is not None:
            # still waiting for the agent's turn elsewhere (another channel, or another
            # conversation of this one): stop waiting (it never started here)
            self.entering.cancel()
            return
        if self.agent is not None and self.session_id is not None:
            try:
                await self.agent.cancel(self.session_id)
            except AcpError:
                log.warning("cancel of %s failed", self.agent_name)


class _StoppedWaiting(Exception):
    """The turn was cancelled while it waited for the agent to finish elsewhere."""


@asynccontextmanager
async def _agent_turn(pool, run: TurnRun):
    """`pool.turn(agent)`, whose waiting `run.cancel()` can end."""
    turn = pool.turn(run.agent_name)
    run.entering = asyncio.ensure_future(turn.__aenter__())
    try:
        agent = await run.entering
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if run.cancelled and run.entering.cancelled() and not (current and current.cancelling()):
            raise _StoppedWaiting() from None
        raise
    finally:
        run.entering = None
    try:
        yield agent
    except BaseException:
        if not await turn.__aexit__(*sys.exc_info()):
            raise
    else:
        await turn.__aexit__(None, None, None)


def context_reader(channel_id: str, limit: int, queued: int, conversation: str = ""):
    """What a turn reads of its conversation's messages to tell its agent (database thread,
    given the member's session there by `Portal.session_with`): (since the member's last seen
    message, the newest). A thread's start with its root; no main-timeline message after the
    root is in them, nor any thread's in the main timeline's
    (docs/architecture.md "Conversations and threads"). Which one is told depends on whether its
    session turns out fresh, known only once it is opened: both are read when they differ."""
    count = limit + 1 + queued

    def read(store, member) -> tuple[list, list]:
        if not limit:
            return [], []
        recent = store.messages_in(channel_id, conversation, None, count)
        if member.last_seen is None or member.fresh:
            return recent, recent
        return store.messages_in(channel_id, conversation, member.last_seen, count), recent

    return read


def unseen_lines(
    read: tuple[list, list] | None, agent: str, current_message_id: str | None, fresh: bool, limit: int
) -> list[UnseenMessage]:
    """What `agent` has not seen in the channel, as context lines (from `context_reader`'s read)."""
    if not limit or read is None:
        return []
    messages = read[1] if fresh else read[0]
    # user messages after the current one are queued: each is told in its own turn, not before
    return [
        UnseenMessage("user" if m.role == "user" else m.sender, m.text)
        for m in messages
        if m.id != current_message_id
        and not (m.role == "user" and current_message_id is not None and m.id > current_message_id)
        and (fresh or m.role != "agent" or m.sender != agent)
    ][-limit:]


def waiting_note(channels: Channels, pool, agent: str, ahead: int | None = None, here: Any = None) -> str:
    """Why an answer has not started: whose turn it is (docs/architecture.md "Who answers"), or that
    the agent starts. `here`: the waiting turn's portal — the agent may be answering in another
    conversation of the same channel (a thread, or the main timeline: one prompt at a time per
    agent)."""
    from .room_names import place_of  # here: a DM is "your direct chat", not "#local"

    busy_in = channels.active_turns.get(agent)
    if busy_in is not None:
        if ahead is None:
            ahead = len(channels.waiting.get(agent, []))
        if busy_in is here:  # another thread of this channel, or its main timeline
            where = "answering in another conversation here"
            return f"{where}; this one is next" if ahead == 0 else f"{where}; {ahead} more before this one"
        where = f"answering in {place_of(busy_in.channel)}"
        if ahead == 0:
            return f"{where}; this channel is next"
        return f"{where}; {ahead} channel{'s' if ahead > 1 else ''} before this one"
    if ahead:
        return f"{ahead} channel{'s' if ahead > 1 else ''} before this one"
    if pool.state(agent) == "stopped":
        return "starting"
    return ""


async def _leave_queue(channels: Channels, pool, run: TurnRun) -> None:
    """`run` got its turn (or ended): the turns still waiting for that agent move up."""
    queue = channels.waiting.get(run.agent_name, [])
    if run not in queue:
        return
    queue.remove(run)
    for ahead, other in enumerate(queue):
        await other.answer.waiting(waiting_note(channels, pool, run.agent_name, ahead, other.portal))


async def run_turn(portal: Portal, record: TurnRecord, incoming: Incoming) -> None:
    """Run a turn its portal claimed (store/turns.py): `record` says who answers what."""
    parts = portal.parts
    config, channels = parts.config, parts.channels
    turn = Turn(record.agent, record.text, record.alone)
    journal = Journal(parts.db, parts.later, record, portal.room_id)
    # everything the turn sends goes into its conversation: in a thread, each new message carries
    # the thread's relation (its reply fallback: the message answered) — the answer, its status
    # and edits, plan and tool calls, questions, attachments, notices (matrix/intent.py InRelation)
    relation = relation_for(record.conversation, record.prompt_event)
    agent_config = config.agents.get(turn.agent)
    if agent_config is None:
        await parts.notices.notice(portal, f"There is no agent called {turn.agent}.", relates_to=relation)
        journal.ended(DROPPED, [], None)
        return
    puppet = relating(await parts.identities.puppet(turn.agent), portal.room_id, relation)
    answer = Answer(puppet.intent, portal.room_id, agent_config.title, TxnIds(f"sk-{record.id}", record.attempt))
    # an earlier attempt may have posted the placeholder: it is found again by its transaction
    # id and edited, never taken for the final message
    answer.reused = record.attempt > 1
    answer.on_messages = journal.messages
    answer.on_final = journal.finishing
    run = TurnRun(portal, turn.agent, answer)
    run.conversation = record.conversation
    run.work = work = parts.work(puppet.intent, portal.room_id, config.attachment_bytes)
    run.prompt_event_id = incoming.event_id
    run.journal = journal
    showing = Showing(
        answer,
        work,
        puppet,
        portal.room_id,
        notices=parts.notices,
        attachment_bytes=config.attachment_bytes,
        media_roots=lambda: roots_for(config, turn.agent, run.session_dir),
        courtesy=channels.courtesy,
        note_tool_call=run.note_tool_call,
    )
    # the note and the place in the queue are taken together (no await between)
    note = waiting_note(channels, parts.pool, turn.agent, here=portal)
    channels.queue(turn.agent).append(run)
    portal.runs[record.conversation] = run
    portal.note_queue(record.conversation)  # the turns still waiting behind it
    # seen: up to the message answered, not up to its answer: a message queued meanwhile has an
    # earlier id than the answer and is still to be read (its own answers the session remembers)
    stored_upto = incoming.message_id
    # a command went without the context: it is still unseen (docs/architecture.md "What each agent reads")
    seen = None if turn.alone or stored_upto is None else (portal.channel.id, turn.agent, stored_upto)
    try:
        # the prompt does not wait for the placeholder; a running agent (idle, or busy in
        # another channel for a moment more) gets a moment to answer first, so a quick answer
        # is one message with its text from the start. A start is slow: it shows at once.
        running = parts.pool.state(turn.agent) in ("ready", "busy")
        posting = answer.post(note, grace=PLACEHOLDER_GRACE if running else 0.0)
        posting.add_done_callback(lambda done: _begin(run, done))
        budgets = getattr(parts, "budgets", None)
        refused = await budgets.refusal(turn.agent, portal) if budgets is not None else None
        if refused is not None:  # over its budget: one line, and the agent is not asked
            await _end(answer, refused)
            journal.ended(ENDED, answer.event_ids, None)
            return
        async with _agent_turn(parts.pool, run) as agent:
            channels.active_turns[turn.agent] = portal
            parts.presence.answering(turn.agent, portal.channel.name)
            await _leave_queue(channels, parts.pool, run)
            run.agent = agent
            if note:  # it was waiting: the channel now shows its turn has come
                answer.set_status(f"⏳ {agent_config.title} is getting ready…")
            showing.typing_after(posting)  # typing while the agent works
            # the member and what the agent has not seen: read together, in one database call
            session_id, fresh, context = await portal.session_with(
                turn.agent,
                agent,
                context_reader(
                    portal.channel.id, config.context_messages, portal.pending(record.conversation), record.conversation
                ),
                conversation=record.conversation,
            )
            run.session_id = session_id
            # its files are posted from where this session works (a thread's worktree, `!cwd`),
            # read now: a later `!cwd` moves the next session, not this one
            run.session_dir = portal.session_dir(turn.agent, record.conversation)
            if run.cancelled:
                await _end(answer, "⏹ stopped")
                journal.ended(ENDED, answer.event_ids, None)
                return
            text = (
                turn.text
                if turn.alone
                else build_prompt(
                    portal.channel.name,
                    unseen_lines(context, turn.agent, incoming.message_id, fresh, config.context_messages),
                    turn.text,
                    config.context_messages,
                    config.context_chars,
                )
            )
            prompt: str | list[dict] = text
            if incoming.attachment is not None:  # as the content this agent takes (media.py)
                prompt, refused = await attachment_prompt(
                    puppet.intent,
                    incoming.attachment,
                    text,
                    agent.prompt_capabilities,
                    agent_config.title,
                    config.attachment_bytes,
                    listening(config, portal, answer),
                )
                if refused is not None:  # one line in the answer's place; nothing goes to the agent
                    await _end(answer, f"⚠️ {refused}")
                    journal.ended(ENDED, answer.event_ids, None)
                    return
            if incoming.message_id is not None:  # a scheduled run answers no message of the room
                channels.courtesy(_after(posting, puppet.intent.read_up_to(portal.room_id, incoming.event_id)))
            # its asks go into its conversation, answered by the owner who sent the message
            # (or any owner: `!approve any-owner`), whom they mention (approvals.py)
            asked = partial(_ask, portal, puppet, record.conversation, incoming.sender, run)
            on_permission, on_question = partial(asked, parts.permissions.ask), partial(asked, parts.questions.ask)
            request = turn.text  # what it was asked: a steer asks it again with more
            if run.steering:  # steered before its prompt was written: in that prompt
                request, prompt = _steered(run, request, prompt, answer)
            try:
                showing.prompting(lambda: agent.asking)
                # its record says "prompted" before the agent can have it (at most once), and the
                # prompt is written the moment that is done
                stop_reason = await agent.prompt(
                    session_id,
                    prompt,
                    showing.on_update,
                    on_permission,
                    on_question,
                    before_send=lambda: _prompting(run),
                    on_sent=lambda: _prompted(run, turn.text),
                )
                # steered meanwhile: the same turn asks again (one record, one answer)
                while run.steering:
                    request, prompt = _steered(run, request, request, answer)
                    run.cancelled = False
                    stop_reason = await agent.prompt(session_id, prompt, showing.on_update, on_permission, on_question)
                run.steerable = False
            finally:
                run.steerable = False
                showing.prompted()
        await showing.work_shown()
        footer = (run.stop_line or "⏹ stopped") if stop_reason == "cancelled" else parts.stop_line(stop_reason)
        # the agent is done: a stop from here on lets the complete answer land and be stored
        # (within FINISH_ON_STOP) rather than marking it interrupted
        closing = asyncio.ensure_future(
            _close(portal, journal, turn.agent, answer, footer, None if seen is None else stored_upto)
        )
        try:
            await asyncio.shield(closing)
            if stop_reason != "cancelled":  # `!voice on`: the answer read aloud too (docs/voice.md)
                channels.courtesy(
                    speak_answer(
                        parts.db,
                        portal.channel.id,
                        puppet.intent,
                        portal.room_id,
                        answer.full_text,
                        config.voice.language,
                    )
                )
        except asyncio.CancelledError:
            if not closing.done():
                await asyncio.wait({closing}, timeout=FINISH_ON_STOP)
            if not closing.done():
                closing.cancel()
            elif not closing.cancelled() and closing.exception() is not None:
                log.warning("answer in %s not finished while stopping: %s", portal.room_id, closing.exception())
            raise
    except _StoppedWaiting:
        await _end(answer, "⏹ stopped")
    except AgentCrashed as exc:
        await _end(answer, f"⚠️ interrupted: {turn.agent} stopped unexpectedly (exit code {exc.exit_code})")
        await crash_notice(parts.notices, portal, puppet, turn.agent, exc)
    except AgentTimeout as exc:
        await _end(answer, f"⚠️ interrupted: {exc}")
    except AcpError as exc:
        if parts.stopping.is_set() and not run.prompt_sent:
            # the bridge stops (its agents with it) before the agent had the prompt: it waits
            # for the next start, like a turn the stop cancelled (released below)
            await asyncio.shield(_paused(answer))
        else:
            await _end(answer, f"⚠️ {exc}")
    except asyncio.CancelledError:
        # the bridge is quitting. An answer begun and not finished is marked so, and not stored
        # (docs/architecture.md "The store"); one whose prompt never reached the agent waits for the
        # next start, which runs it and takes its placeholder over
        if not run.prompt_sent:
            await asyncio.shield(_paused(answer))
        elif not answer.finished:
            await asyncio.shield(_interrupted(answer, "the bridge stopped"))
        raise
    except Exception as exc:
        # the homeserver, the store or a bug: the answer ends marked interrupted, unstored; if
        # even that cannot be shown, its record stays prompted and the next start marks it
        why = _failure(exc)
        if isinstance(exc, (MatrixError, AnswerNotFinished, StoreError, aiohttp.ClientError)):
            log.warning("answer of %s in %s cut: %s", turn.agent, portal.room_id, exc)
        else:
            log.exception("answer of %s in %s cut", turn.agent, portal.room_id)
        if not answer.finished:
            await asyncio.shield(_interrupted(answer, why, timeout=FAILED_FINISH_TIMEOUT))
    finally:
        await asyncio.shield(showing.work_shown())  # the plan and tool calls keep their last state
        if not journal.closed:
            _close_record(run, seen)
        await _leave_queue(channels, parts.pool, run)
        if portal.runs.get(record.conversation) is run:
            del portal.runs[record.conversation]
        if channels.active_turns.get(turn.agent) is portal:
            del channels.active_turns[turn.agent]
            parts.presence.answering(turn.agent, None)
        await showing.typing_ended()
        # the others have its answer to read: they prepare it (prepare.py)
        prepare.soon(portal, [m for m in portal.member_names() if m != turn.agent], record.conversation)


def _steered(run: TurnRun, request: str, prompt: str | list[dict], answer: Answer) -> tuple[str, str | list[dict]]:
    """What the agent is asked once steered: (the request with the steering words, the prompt
    with them); the answer shows where it was steered."""
    words = "\n\n".join(run.steering)
    run.steering.clear()
    answer.append(("\n\n" if answer.full_text else "") + f"↪ steered: {words}\n\n")
    if isinstance(prompt, list):
        return f"{request}\n\n{words}", [*prompt, {"type": "text", "text": words}]
    return f"{request}\n\n{words}", f"{prompt}\n\n{words}"


async def _ask(portal: Portal, puppet, conversation: str, requester: str | None, run: TurnRun, ask, request):
    """Ask the owner through `ask` (permissions.py, coding/questions.py): who answers and whom
    it mentions, as the channel's `!approve` says (approvals.py) when it is asked."""
    parts = portal.parts
    mode = approve_mode(await parts.db.get_value(keys.approve(portal.channel.id)))
    asker, mention = approvers(mode, requester, parts.config.owners)
    return await ask(portal, puppet, request, conversation=conversation, asker=asker, run=run, mention=mention)


async def _after(first: asyncio.Task, then) -> None:
    """`then` once `first` is done: the placeholder is not kept waiting by courtesy requests."""
    await asyncio.wait({first})
    await then


def _begin(run: TurnRun, posting: asyncio.Task) -> None:
    """The placeholder is posted: the record knows its event (unless the prompt went first)."""
    if not posting.cancelled() and posting.exception() is None and not run.prompt_sent:
        run.journal.posted(run.answer.event_ids)


async def _prompting(run: TurnRun) -> None:
    """`session/prompt` is about to be written to the agent: its record says so first. From
    then on the answer has begun, and a stop marks it interrupted instead of running it again —
    a prompt reaches its agent at most once, whenever the bridge is killed."""
    await run.journal.prompting(run.answer.event_ids)
    run.prompt_sent = True


def _prompted(run: TurnRun, text: str) -> None:
    """`session/prompt` was written: its record says so, and the session's last use is recorded
    (sessions.py) — after the prompt, so that this write never keeps the prompt waiting."""
    run.journal.prompted(run.answer.event_ids)
    record_use(run.portal, run.agent_name, run.agent, run.conversation, run.session_id, text)


def _close_record(run: TurnRun, seen: tuple[str, str, str] | None) -> None:
    """The turn is over without a stored answer. Shown with its end (stopped, crashed…): ended.
    Quitting before the agent had the prompt: released, for the next start to run. Begun and
    not shown as ended (the homeserver refused it, a kill): left as it is, for the next start
    to mark interrupted."""
    task = asyncio.current_task()
    quitting = task is not None and task.cancelling()
    if not run.prompt_sent and (quitting or not run.answer.finished):
        run.journal.release()
    elif run.answer.finished:
        run.journal.ended(INTERRUPTED if quitting else ENDED, run.answer.event_ids, seen)


async def crash_notice(notices: Notices, portal: Portal, puppet, agent: str, exc: AgentCrashed) -> None:
    """The agent's process died mid-answer: its exit code and the end of its stderr."""
    tail = "\n".join((exc.stderr_tail or "").strip().splitlines()[-STDERR_LINES:])
    text = f"⚠️ {agent} stopped unexpectedly (exit code {exc.exit_code})."
    html = f"<p>{text}</p>"
    if tail:
        text += f" The end of its error output:\n{tail}"
        html += f"<p>The end of its error output:</p><pre><code>{escape_html(tail)}</code></pre>"
    text += "\nThe next message starts it again."
    html += "<p>The next message starts it again.</p>"
    await notices.send(puppet, portal.room_id, text, html)


async def _interrupted(answer: Answer, why: str, timeout: float = 5) -> None:
    try:
        await asyncio.wait_for(answer.finish(f"⚠️ interrupted: {why}"), timeout=timeout)
    except Exception:
        log.warning("could not mark an answer as interrupted; the next start will")


async def _close(
    portal: Portal, journal: Journal, agent: str, answer: Answer, footer: str | None, seen_upto: str | None
) -> None:
    """The final text of an answer the agent finished, then the answer, what the agent has seen
    and its turn done, stored together."""
    event_ids = await answer.finish(footer, complete=True)
    journal.answered(portal.channel.id, agent, answer.full_text, event_ids, seen_upto)


async def _paused(answer: Answer) -> None:
    """The bridge stops before the agent had the prompt: the placeholder says it waits."""
    if answer.event_ids:
        answer.set_status(PAUSED)
        try:
            await asyncio.wait_for(answer.show_status(), timeout=5)
        except Exception:
            log.info("the placeholder in %s still says it is getting ready", answer.room_id)


async def _end(answer: Answer, footer: str) -> None:
    """Finish an answer that ended early (stopped, crashed…); if even that cannot be shown,
    its record stays prompted and the next start marks it (recovery_plan.py)."""
    try:
        await answer.finish(footer)
    except AnswerNotFinished as exc:
        log.warning("%s", exc)


def _failure(exc: BaseException) -> str:
    """What the owner is told when a turn fails outside the agent."""
    if isinstance(exc, (MatrixError, AnswerNotFinished, aiohttp.ClientError)):
        return "the homeserver did not take a message of this answer"
    if isinstance(exc, StoreError):
        return "the database failed while this answer was written"
    return "an error in the bridge (see its log)"
