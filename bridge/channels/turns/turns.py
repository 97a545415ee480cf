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
import dataclasses
import logging
import sys
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from acp import AcpError, AgentCrashed, AuthRequired, Update
from store import TurnRecord, keys
from store.turns import DROPPED, ENDED, INTERRUPTED

from ...matrix.markdown import escape_html
from ...matrix.puppet import after_sent, relating
from ...voice.spoken import speak_answer
from ..base.conversations import relation_for
from ..base.parts import AskedIn
from ..base.stream import Answer, AnswerNotFinished, TxnIds
from ..rules.approvals import approve_mode, approvers
from ..rules.lead_up import with_lead_up
from ..rules.logins import agent_method, asked_line, failed_line, login_line, method_type
from . import prepare
from .agent_files import roots_for
from .context import Handed, UnseenMessage, build_prompt, unframe
from .endings import END, PAUSE, STOPPED, Ending, Stopped, StoppedWaiting, ending
from .handing import end_chain
from .handoffs import parse_handoff_key
from .journal import Journal
from .prompt import attachment_prompt, heard_first, listening
from .sessions import record_use
from .showing import Showing

if TYPE_CHECKING:
    from store import Channel

    from ..base.notices import Notices
    from ..base.parts import ChannelParts, WorkShown
    from ..base.registry import Channels
    from .incoming import Incoming

log = logging.getLogger(__name__)

PAUSED = "⏸ the bridge stopped before this answer began: it is answered when the bridge is back"
# seconds a running agent has to answer before "getting ready" shows: the local agent's warm
# first token comes 0.2-0.3 s after its prompt on 2 cores; a first part within the grace is the
# first message itself (one send), one after it waits for the placeholder's send and then edits
# it (a second round trip; docs/performance.md "The local agent's first token")
PLACEHOLDER_GRACE = 0.4
STDERR_LINES = 12  # lines of a crashed agent's stderr shown in its notice
FINISH_ON_STOP = 5  # seconds a stopping bridge gives an answer the agent has finished
LOGIN_EVERY = 2.0  # seconds between tries to open a session while the owner logs the agent in
LOGIN_WAIT = 1800.0  # seconds a message waits for its agent's login


class Portal(Protocol):
    """The channel a turn runs in, as the turn sees it (portal.Portal runs it)."""

    parts: ChannelParts
    channel: Channel
    runs: dict[str, RunningTurn]  # conversation → its running turn
    room_id: str

    def member_names(self) -> list[str]: ...

    def note_queue(self, conversation: str) -> None: ...

    def pending(self, conversation: str | None = None) -> int: ...

    async def session_with(
        self, agent_name: str, agent: Any, also: Any = None, conversation: str = ""
    ) -> tuple[str, bool, Any]: ...


class RunningTurn:
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
        # set as the turn is prepared (run_turn)
        self.record: TurnRecord | None = None  # its record: who answers what, where
        self.incoming: Incoming | None = None  # the owner's message it answers
        self.puppet: Any = None  # the answering agent's puppet, sending into the turn's conversation
        self.title = agent_name  # the agent's title, as its answer shows it
        self.showing: Showing | None = None  # what the owner sees while the agent works
        self.note = ""  # why the answer waits, as its placeholder first says ("" it does not)
        self.seen: tuple[str, str, str] | None = None  # (channel, agent, message) seen once answered
        self.posting: asyncio.Task | None = None  # the placeholder being posted
        self.stop_reason: str | None = None  # the agent's, once it is done

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
        if await self._steered_natively(text):
            return True
        if not self.steerable:  # it ended while the agent was asked: too late
            return False
        self.steering.append(text)
        if self.prompt_sent:
            await self.cancel()
        return True

    async def _steered_natively(self, text: str) -> bool:
        """An agent that steers inside its running turn (`_session/steering`: docs/sessions.md
        "Steering inside the turn") is handed `text` there: the turn goes on, one answer. False when it does not,
        or had no running turn (`promptRequired`): then the prompt is asked again."""
        agent, session_id = self.agent, self.session_id
        if not (self.prompt_sent and session_id and getattr(agent, "steers", False)):
            return False
        if await agent.steer(session_id, text) == "promptRequired":
            return False
        self.answer.append(("\n\n" if self.answer.full_text else "") + f"↪ steered: {text}\n\n")
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


@asynccontextmanager
async def _agent_turn(pool, run: RunningTurn):
    """`pool.turn(agent)`, whose waiting `run.cancel()` can end."""
    turn = pool.turn(run.agent_name)
    run.entering = asyncio.ensure_future(turn.__aenter__())
    try:
        agent = await run.entering
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if run.cancelled and run.entering.cancelled() and not (current and current.cancelling()):
            raise StoppedWaiting() from None
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
    session turns out fresh, known only once it is opened: both are read when they differ. The
    newest, in a thread, begin with the main timeline's messages up to its root (docs/using.md
    "Threads"); a session that is not fresh there (`!fork`'s copy) already knows them."""
    count = limit + 1 + queued

    def read(store, member) -> tuple[list, list]:
        if not limit:
            return [], []
        own = store.messages_in(channel_id, conversation, None, count)
        recent = own
        if conversation:  # a fresh session of a thread is told what led to its root too
            recent = with_lead_up(store.lead_up(channel_id, conversation, count), own, count)
        if member.fresh:
            return recent, recent
        if member.last_seen is None:  # a forked session already knows what led to the thread
            return own, recent
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
    from ..base.room_names import place_of  # here: a DM is "your direct chat", not "#local"

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


async def _leave_queue(channels: Channels, pool, run: RunningTurn) -> None:
    """`run` got its turn (or ended): the turns still waiting for that agent move up."""
    queue = channels.waiting.get(run.agent_name, [])
    if run not in queue:
        return
    queue.remove(run)
    for ahead, other in enumerate(queue):
        await other.answer.waiting(waiting_note(channels, pool, run.agent_name, ahead, other.portal))


async def run_turn(portal: Portal, record: TurnRecord, incoming: Incoming) -> None:
    """Run a turn its portal claimed (store/turns.py): `record` says who answers what. It is
    prepared (its answer, its place in the agent's queue), prompted (the agent asked, its answer
    streamed) and closed (the final text sent, the answer stored); whatever stops it before it
    closes ends it as endings.py's table says."""
    run = await _prepare(portal, record, incoming)
    if run is None:
        return
    try:
        stop_reason = run.stop_reason = await _prompt(run)
        if stop_reason is not None:
            await _close_answer(run, stop_reason)
    except BaseException as exc:
        end = ending(exc, Stopped(record.agent, portal.parts.stopping.is_set(), run.prompt_sent))
        if end is None:
            raise
        await _show_ending(run, end, exc)
        if end.reraise:
            raise
    finally:
        await _leave(run)


async def _prepare(portal: Portal, record: TurnRecord, incoming: Incoming) -> RunningTurn | None:
    """The turn's answer and what shows its work, its place in its agent's queue and in the
    portal's running turns; None when its agent is not configured (the record is dropped)."""
    parts = portal.parts
    config, channels = parts.config, parts.channels
    journal = Journal(parts.db, parts.later, record, portal.room_id)
    # everything the turn sends goes into its conversation: in a thread, each new message carries
    # the thread's relation (its reply fallback: the message answered) — the answer, its status
    # and edits, plan and tool calls, questions, attachments, notices (matrix/intent.py InRelation)
    relation = relation_for(record.conversation, record.prompt_event)
    agent_config = config.agents.get(record.agent)
    if agent_config is None:
        await parts.notices.notice(portal, f"There is no agent called {record.agent}.", relates_to=relation)
        journal.ended(DROPPED, [], None)
        return None
    puppet = relating(await parts.identities.puppet(record.agent), portal.room_id, relation)
    # the room shows the prompt before anything of its answer (a client's quote still being sent)
    puppet = after_sent(puppet, portal.room_id, incoming.shown)
    answer = Answer(puppet.intent, portal.room_id, agent_config.title, TxnIds(f"sk-{record.id}", record.attempt))
    # an earlier attempt may have posted the placeholder: it is found again by its transaction
    # id and edited, never taken for the final message
    answer.reused = record.attempt > 1
    answer.on_messages = journal.messages
    answer.on_final = journal.finishing
    hop = parse_handoff_key(record.prompt_event)
    if hop is not None:  # its status line says who handed it on (docs/sessions.md)
        answer.set_note("handoff", f"↪ {hop.from_agent} → {record.agent}")
    run = RunningTurn(portal, record.agent, answer)
    run.record, run.incoming, run.puppet, run.title = record, incoming, puppet, agent_config.title
    run.conversation = record.conversation
    run.work = work = parts.work(puppet.intent, portal.room_id, config.attachment_bytes)
    run.prompt_event_id = incoming.event_id
    run.journal = journal
    run.showing = Showing(
        answer,
        work,
        puppet,
        portal.room_id,
        notices=parts.notices,
        attachment_bytes=config.attachment_bytes,
        media_roots=lambda: roots_for(config, record.agent, run.session_dir),
        courtesy=channels.courtesy,
        note_tool_call=run.note_tool_call,
    )
    # the note and the place in the queue are taken together (no await between)
    run.note = waiting_note(channels, parts.pool, record.agent, here=portal)
    channels.queue(record.agent).append(run)
    portal.runs[record.conversation] = run
    portal.note_queue(record.conversation)  # the turns still waiting behind it
    # seen: up to the message answered, not up to its answer: a message queued meanwhile has an
    # earlier id than the answer and is still to be read (its own answers the session remembers)
    # a command went without the context: it is still unseen (docs/architecture.md "What each agent reads")
    if not record.alone and incoming.message_id is not None:
        run.seen = (portal.channel.id, record.agent, incoming.message_id)
    return run


async def _prompt(run: RunningTurn) -> str | None:
    """The placeholder posted, the agent's turn waited for, its session and what it has not seen
    read, the prompt built and sent (again when steered): the agent's stop reason, or None when
    the turn ended before the agent was asked (over budget, stopped, an attachment refused)."""
    portal, record, incoming, answer = run.portal, run.record, run.incoming, run.answer
    parts = portal.parts
    channels = parts.channels
    # the prompt does not wait for the placeholder; a running agent (idle, or busy in another
    # channel for a moment more) gets a moment to answer first, so a quick answer is one
    # message with its text from the start. A start is slow: it shows at once.
    running = parts.pool.state(record.agent) in ("ready", "busy")
    heard = await _heard_first(run)  # a voice note: its 🎙 line comes before the answer in the room
    run.posting = posting = answer.post(run.note, grace=PLACEHOLDER_GRACE if running else 0.0)
    posting.add_done_callback(lambda done: _begin(run, done))
    budgets = getattr(parts, "budgets", None)
    refused = await budgets.refusal(record.agent, portal) if budgets is not None else None
    if refused is not None:  # over its budget: one line, and the agent is not asked
        await _ended_early(run, refused)
        return None
    async with _agent_turn(parts.pool, run) as agent:
        channels.active_turns[record.agent] = portal
        parts.presence.answering(record.agent, portal.channel.name)
        await _leave_queue(channels, parts.pool, run)
        run.agent = agent
        if run.note:  # it was waiting: the channel now shows its turn has come
            answer.set_status(f"⏳ {run.title} is getting ready…")
        run.showing.typing_after(posting)  # typing while the agent works
        session_id, fresh, context = await _session_of(run, agent)
        if run.cancelled:
            await _ended_early(run, STOPPED)
            return None
        prompt = await _prompt_content(run, agent, _prompt_text(run, context, fresh), heard)
        if prompt is None:
            return None
        # a scheduled run answers no message of the room; a key that is no event has no receipt
        if incoming.message_id is not None and incoming.event_id.startswith("$"):
            channels.courtesy(_after(posting, run.puppet.intent.read_up_to(portal.room_id, incoming.event_id)))
        return await _asked(run, agent, session_id, prompt)


async def _session_of(run: RunningTurn, agent) -> tuple[str, bool, Any]:
    """The turn's session (opened once the agent is logged in) and what the agent has not seen,
    read together in one database call; where the session works, read now: a later `!cwd`
    moves the next session, not this one (its files are posted from there)."""
    portal, record = run.portal, run.record
    config = portal.parts.config
    session_id, fresh, context = await _logged_in(
        run,
        agent,
        lambda: portal.session_with(
            record.agent,
            agent,
            context_reader(
                portal.channel.id, config.context_messages, portal.pending(record.conversation), record.conversation
            ),
            conversation=record.conversation,
        ),
    )
    run.session_id = session_id
    run.session_dir = portal.session_dir(record.agent, record.conversation)
    return session_id, fresh, context


async def _prompt_content(run: RunningTurn, agent, text: str, heard: bytes | None) -> str | list[dict] | None:
    """The prompt: `text`, with the message's attachment as the content this agent takes
    (media.py); None when the attachment is refused (one line in the answer's place)."""
    attachment = run.incoming.attachment
    if attachment is None:
        return text
    config = run.portal.parts.config
    prompt, refused = await attachment_prompt(
        run.puppet.intent,
        attachment,
        text,
        agent.prompt_capabilities,
        run.title,
        config.attachment_bytes,
        listening(config, run.portal, run.answer),
        heard,
        captioned=bool(run.record.text.strip()),
    )
    if refused is not None:  # nothing goes to the agent
        await _ended_early(run, f"⚠️ {refused}")
        return None
    return prompt


async def _asked(run: RunningTurn, agent, session_id: str, prompt: str | list[dict]) -> str:
    """The prompt sent (again when steered meanwhile: one record, one answer): the stop reason."""
    portal, record, showing, answer = run.portal, run.record, run.showing, run.answer
    parts = portal.parts
    # its asks go into its conversation, answered by the owner who sent the message
    # (or any owner: `!approve any-owner`), whom they mention (approvals.py)
    asked = partial(_ask, portal, run.puppet, record.conversation, run.incoming.sender, run)
    on_permission, on_question = partial(asked, parts.permissions.ask), partial(asked, parts.questions.ask)
    # and to the ACP clients attached there
    on_update, on_permission, on_question = _attached(run, on_permission, on_question)
    request = record.text  # what it was asked: a steer asks it again with more
    if run.steering:  # steered before its prompt was written: in that prompt
        request, prompt = _steered(run, request, prompt, answer)
    try:
        showing.prompting(lambda: agent.asking)
        # its record says "prompting" before the agent can have it (at most once), and the
        # prompt is written the moment that is done; "prompted" once all of it is in the
        # agent's stdin (a kill before that: not known whether it arrived, and said so)
        stop_reason: str = await agent.prompt(
            session_id,
            prompt,
            on_update,
            on_permission,
            on_question,
            before_send=lambda: _prompting(run),
            on_written=lambda: _prompted(run, record.text),
        )
        # steered meanwhile: the same turn asks again (one record, one answer)
        while run.steering:
            request, prompt = _steered(run, request, request, answer)
            run.cancelled = False
            stop_reason = await agent.prompt(session_id, prompt, on_update, on_permission, on_question)
        run.steerable = False
    finally:
        run.steerable = False
        showing.prompted()
    return stop_reason


async def _logged_in(run: RunningTurn, agent, open_session):
    """The session opened, once the agent is logged in (docs/sessions.md "Logins"): an agent that
    answers `auth_required` gets the owner one line in the answer (the command to run, or the
    agent logging in itself through `authenticate`, what it asks relayed), and the session is
    tried again every LOGIN_EVERY seconds, so the message is answered once logged in. Stopped, or
    still not logged in after LOGIN_WAIT: the agent's refusal ends the turn."""
    try:
        return await open_session()
    except AuthRequired as exc:
        refused = exc
    command = run.portal.parts.config.agents[run.agent_name].command
    run.answer.set_status(login_line(run.title, command, refused.methods))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LOGIN_WAIT
    method = agent_method(refused.methods)
    if method is not None and not any(method_type(m) == "terminal" for m in refused.methods):
        await _agent_login(run, agent, method, deadline - loop.time())
    while not run.cancelled and loop.time() < deadline:
        try:
            opened = await open_session()
        except AuthRequired:
            await asyncio.sleep(LOGIN_EVERY)
            continue
        run.answer.set_status(f"⏳ {run.title} is getting ready…")
        return opened
    raise refused


async def _agent_login(run: RunningTurn, agent, method: dict[str, Any], wait: float) -> None:
    """`authenticate` with an `agent` method, for at most `wait` seconds or until `!stop`: each
    page the agent asks the owner to open replaces the answer's line (its host, then the link:
    `asked_line`); a login that fails says why in one line, and the message still waits."""

    def asked(safe: tuple[str, str] | None, message: str) -> None:
        run.answer.set_status(asked_line(run.title, method, safe, message))

    login = asyncio.ensure_future(agent.authenticate(method["id"], asked, wait))
    try:
        while not login.done() and not run.cancelled:
            await asyncio.wait({login}, timeout=LOGIN_EVERY)
    finally:
        if not login.done():
            login.cancel()  # stopped: the agent is told (`$/cancel_request`)
            await asyncio.gather(login, return_exceptions=True)
    if login.cancelled() or login.exception() is None:
        return
    exc = login.exception()
    if not isinstance(exc, AcpError):
        raise exc
    log.info("%s: authenticate %s: %s", run.agent_name, method["id"], exc)
    run.answer.set_status(failed_line(run.title, method, str(exc)))


async def _heard_first(run: RunningTurn) -> bytes | None:
    """A voice note is heard before the answer is posted (docs/voice.md "Voice notes in"): its
    bytes, for the prompt; None for any other message. No status line yet: nothing to show it in."""
    config, portal = run.portal.parts.config, run.portal
    hearing = dataclasses.replace(listening(config, portal, run.answer), status=lambda status: None)
    return await heard_first(run.puppet.intent, run.incoming.attachment, config.attachment_bytes, hearing)


def _attached(run: RunningTurn, on_permission, on_question):
    """What the turn tells the ACP clients attached to its conversation (bridge/attach/hub.py):
    the owner's words, then each of the agent's updates as it came, beside the room's; its
    permission requests and questions asked there too. Without any: the room's alone."""
    portal, record, showing = run.portal, run.record, run.showing
    hub = getattr(portal.parts, "attached", None)
    if hub is None:
        return showing.on_update, on_permission, on_question
    channel_id, conversation = portal.channel.id, record.conversation
    if run.incoming.message_id is not None:
        hub.began(channel_id, conversation, run.incoming.event_id, run.incoming.body)

    def on_update(update: Update) -> None:
        hub.update(channel_id, conversation, update.raw)  # forwarded as it came, before the room's work
        showing.on_update(update)

    asker, questioner = hub.asker(channel_id, conversation, on_permission), hub.questioner
    return on_update, asker, questioner(channel_id, conversation, on_question)


def _prompt_text(run: RunningTurn, context: tuple[list, list] | None, fresh: bool) -> str:
    """What the agent is asked: the turn's text after what it has not seen (context.py), alone
    for a command. A handed turn (handoffs.py) is framed with who handed it on, and answers no
    message: what it has seen is all it was told (`context_reader`'s newest)."""
    portal, record, config = run.portal, run.record, run.portal.parts.config
    if record.alone:
        return record.text
    hop = parse_handoff_key(record.prompt_event)
    if hop is not None and context is not None and context[1]:
        run.seen = (portal.channel.id, record.agent, context[1][-1].id)
    return build_prompt(
        portal.channel.name,
        unseen_lines(context, record.agent, run.incoming.message_id, fresh, config.context_messages),
        record.text,
        config.context_messages,
        config.context_chars,
        config.agents,
        handed=Handed(hop.from_agent, hop.scheduled) if hop is not None else None,
    )


async def _ended_early(run: RunningTurn, footer: str) -> None:
    """The turn ends before its agent is asked: its answer says why, its record is ended."""
    await _end(run.answer, footer)
    run.journal.ended(ENDED, run.answer.event_ids, None)


async def _close_answer(run: RunningTurn, stop_reason: str) -> None:
    """The agent is done: the final text sent, then the answer, what the agent has seen and its
    turn done, stored together; `!voice on` reads it aloud. A stop from here on lets the complete
    answer land and be stored (within FINISH_ON_STOP) rather than marking it interrupted."""
    portal, parts, answer = run.portal, run.portal.parts, run.answer
    await run.showing.work_shown()
    footer = (run.stop_line or STOPPED) if stop_reason == "cancelled" else parts.stop_line(stop_reason)
    seen_upto = None if run.seen is None else run.seen[2]
    closing = asyncio.ensure_future(_store_answer(run, footer, seen_upto))
    try:
        await asyncio.shield(closing)
        if stop_reason != "cancelled":  # `!voice on`: the answer read aloud too (docs/voice.md)
            parts.channels.courtesy(
                speak_answer(
                    parts.db,
                    portal.channel.id,
                    run.puppet.intent,
                    portal.room_id,
                    answer.full_text,
                    parts.config.voice.language,
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


async def _show_ending(run: RunningTurn, end: Ending, exc: BaseException) -> None:
    """What an ending shows (endings.py): the answer's footer, its placeholder paused, or the
    answer marked interrupted; a crash's notice; a failure in the log."""
    portal, answer = run.portal, run.answer
    if end.log == "warning":
        log.warning("answer of %s in %s cut: %s", run.agent_name, portal.room_id, exc)
    elif end.log == "exception":
        log.error("answer of %s in %s cut", run.agent_name, portal.room_id, exc_info=exc)
    if end.show == END:
        await _end(answer, end.text)
    elif end.show == PAUSE:
        await asyncio.shield(_paused(answer))
    elif not answer.finished:
        await asyncio.shield(_interrupted(answer, end.text, timeout=end.timeout))
    if end.crash_notice and isinstance(exc, AgentCrashed):
        await crash_notice(portal.parts.notices, portal, run.puppet, run.agent_name, exc)


async def _leave(run: RunningTurn) -> None:
    """Whatever the end: the plan and tool calls keep their last state, the record is closed,
    the turn leaves its agent's queue and the portal's running turns; the other members prepare
    (prepare.py) — they have its answer to read."""
    portal, parts = run.portal, run.portal.parts
    channels, conversation = parts.channels, run.conversation
    await asyncio.shield(run.showing.work_shown())
    if not run.journal.closed:
        _close_record(run, run.seen)
    await _leave_queue(channels, parts.pool, run)
    if run.cancelled:  # stopped (`!stop`, 🛑, a budget): the chain of hand-offs ends with it
        try:
            await asyncio.shield(end_chain(portal, conversation))
        except Exception as exc:
            log.warning("the hand-offs pending in %s were not dropped: %s", portal.room_id, exc)
    if portal.runs.get(conversation) is run:
        del portal.runs[conversation]
    if channels.active_turns.get(run.agent_name) is portal:
        del channels.active_turns[run.agent_name]
        parts.presence.answering(run.agent_name, None)
    await run.showing.typing_ended()
    attached = getattr(parts, "attached", None)
    if attached is not None and run.record is not None:  # a client's prompt waiting for it
        reason = "cancelled" if run.cancelled and run.stop_reason is None else (run.stop_reason or "end_turn")
        attached.ended(run.prompt_event_id, run.record.id, reason)
    prepare.soon(portal, [m for m in portal.member_names() if m != run.agent_name], conversation)


def _steered(run: RunningTurn, request: str, prompt: str | list[dict], answer: Answer) -> tuple[str, str | list[dict]]:
    """What the agent is asked once steered: (the request with the steering words, the prompt
    with them); the answer shows where it was steered."""
    words = "\n\n".join(run.steering)
    run.steering.clear()
    answer.append(("\n\n" if answer.full_text else "") + f"↪ steered: {words}\n\n")
    told = unframe(words)  # in the prompt none of its lines reads as a frame (context.py)
    if isinstance(prompt, list):
        return f"{request}\n\n{words}", [*prompt, {"type": "text", "text": told}]
    return f"{request}\n\n{words}", f"{prompt}\n\n{told}"


async def _ask(portal: Portal, puppet, conversation: str, requester: str | None, run: RunningTurn, ask, request):
    """Ask the owner through `ask` (permissions.py, coding/questions.py): who answers and whom
    it mentions, as the channel's `!approve` says (approvals.py) when it is asked."""
    parts = portal.parts
    mode = approve_mode(await parts.db.get_value(keys.approve(portal.channel.id)))
    asker, mention = approvers(mode, requester, parts.config.owners)
    return await ask(AskedIn(portal, puppet, conversation, asker, run, mention), request)


async def _after(first: asyncio.Task, then) -> None:
    """`then` once `first` is done: the placeholder is not kept waiting by courtesy requests."""
    await asyncio.wait({first})
    await then


def _begin(run: RunningTurn, posting: asyncio.Task) -> None:
    """The placeholder is posted: the record knows its event (unless the prompt went first)."""
    if not posting.cancelled() and posting.exception() is None and not run.prompt_sent:
        run.journal.posted(run.answer.event_ids)


async def _prompting(run: RunningTurn) -> None:
    """`session/prompt` is about to be written to the agent: its record says so first. From
    then on the answer has begun, and a stop marks it interrupted instead of running it again —
    a prompt reaches its agent at most once, whenever the bridge is killed."""
    await run.journal.prompting(run.answer.event_ids)
    run.prompt_sent = True


def _prompted(run: RunningTurn, text: str) -> None:
    """`session/prompt` is in the agent's stdin: its record says so, and the session's last use is recorded
    (sessions.py) — after the prompt, so that this write never keeps the prompt waiting."""
    run.journal.prompted(run.answer.event_ids)
    record_use(run.portal, run.agent_name, run.agent, run.conversation, run.session_id, text)


def _close_record(run: RunningTurn, seen: tuple[str, str, str] | None) -> None:
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
    """The agent's process died mid-answer: its exit code and the end of its stderr (an agent
    over ssh whose connection failed: ssh's reason, in one line)."""
    if exc.connection:
        await notices.send(puppet, portal.room_id, f"⚠️ {agent}: {exc.connection}. The next message starts it again.")
        return
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


async def _store_answer(run: RunningTurn, footer: str | None, seen_upto: str | None) -> None:
    """The final text of an answer the agent finished, then the answer, what the agent has seen
    and its turn done, stored together."""
    event_ids = await run.answer.finish(footer, complete=True)
    run.journal.answered(run.portal.channel.id, run.agent_name, run.answer.full_text, event_ids, seen_upto)


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
