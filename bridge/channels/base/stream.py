"""One streamed answer: a puppet message posted at once and edited (`m.replace`) as parts arrive.

While it streams, each message carries MSC4357's live marker (`org.matrix.msc4357.live: {}`, in
the first event and in every edit's `m.new_content`), so that clients which know it show it
live, without "(edited)" and a notification per edit; the final edit drops it. An answer posted
once, final, carries none.

Media from the agent (an image, a file: `add_media`) goes in the answer's place: the text before
it closes its message, the media event follows, and later text continues in a new message.

Edits are throttled: the first part shows at once, later ones at most about twice a second and
less often as the message grows, never more than MAX_EDITS per message. Past SPLIT_WEIGHT (the
text's size as escaped in JSON: intent.weight) the answer continues in a new message: an event
is at most 64 KiB as sent, encryption makes it about a third larger, and an edit carries its
text twice (new body and HTML; its fallback body is cut by the Intent when that is needed).
Every event is measured after encryption by the Intent, which drops a message's HTML if that is
what it takes; an event that still would not fit (EventTooLarge, never sent) makes this answer
split its text at half the size and try again.

An answer has a total cap, MAX_ANSWER_BYTES of text: what the agent writes past it is dropped,
and the answer ends with a line saying it was cut.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable

import aiohttp

from ...matrix.client import MatrixError
from ...matrix.intent import EventTooLarge, Intent, weight
from ...matrix.markdown import escape_html, markdown_to_html, needs_html
from .background import stop_task

log = logging.getLogger(__name__)

SPLIT_WEIGHT = 15_000  # a message's text, as escaped in JSON (intent.weight): see above
MIN_SPLIT_WEIGHT = 1_000  # the least an event that did not fit is split to
MAX_ANSWER_BYTES = 1024 * 1024  # the text of one answer (UTF-8); the rest is dropped
CUT_LINE = "✂️ The answer was cut here: it passed the 1 MiB limit of one answer."
MAX_EDITS = 99  # intermediate edits + the final one stay within 100 per message
BASE_INTERVAL = 0.5  # seconds between edits at the start (2 per second)
# After a quick first part, how long the first message waits for the answer's end: an answer
# that ends at once (a short reply, a command's output) is then one message, never edited —
# half the homeserver writes, and no "(edited)" in the client.
SETTLE = 0.003
FINAL_ATTEMPTS = 3  # the final text is sent this many times before the answer counts as cut
FINAL_RETRY = 1.0  # seconds before the second attempt (twice that before the third…)
# A homeserver that is away (5xx, no connection: its database restarting) is waited for this
# long, FINAL_RETRY_MAX between attempts, before the answer counts as cut (docs/outages.md)
FINAL_PATIENCE = 600.0
FINAL_RETRY_MAX = 10.0
LIVE = "org.matrix.msc4357.live"  # MSC4357: this message is still being written


class TxnIds:
    """The transaction ids of one answer: the placeholder's is the turn's own (a later attempt
    of the same turn finds its placeholder again by it); every other send gets the next of
    `<turn>.<attempt>.<n>` — never one an earlier attempt used with other content."""

    def __init__(self, turn: str, attempt: int = 1):
        self.placeholder = turn
        self._base = f"{turn}.{attempt}"
        self._n = 0

    def next(self) -> str:
        self._n += 1
        return f"{self._base}.{self._n}"


class AnswerNotFinished(Exception):
    """The homeserver did not take the final text of an answer."""


def edit_interval(edits: int) -> float:
    """Longer waits as a message gets more edits: 0.5 s, then 1 s after 25 edits, 1.5 s after 50..."""
    return BASE_INTERVAL * (1 + edits / 25)


def fits(text: str, limit: int = SPLIT_WEIGHT) -> bool:
    """Whether `text` weighs at most `limit` (a character weighs at least 1: a longer text is
    not even measured)."""
    return len(text) <= limit and weight(text) <= limit


def split_point(text: str, limit: int = SPLIT_WEIGHT) -> int:
    """Where to cut `text` so the head weighs at most `limit` (intent.weight: its size escaped
    in an event's JSON), at a paragraph, line or word boundary when one is near. Measured by
    halving (json's encoder, in C), never character by character: a megabyte arrives at once."""
    if fits(text, limit):
        return len(text)
    low, high = 0, min(len(text), limit)  # the longest head that fits is in [low, high]
    while low < high:
        middle = (low + high + 1) // 2
        if weight(text[:middle]) <= limit:
            low = middle
        else:
            high = middle - 1
    head = text[: max(low, 1)]
    for sep in ("\n\n", "\n", " "):
        at = head.rfind(sep)
        if at > len(head) * 0.8:
            return at + len(sep)
    return len(head)


MAX_NOTICE_PARTS = 8  # a long notice (a listing, an agent's words) goes in this many messages at most


def notice_parts(text: str, limit: int = SPLIT_WEIGHT, parts: int = MAX_NOTICE_PARTS) -> list[str]:
    """`text` in pieces that each weigh at most about `limit` (cut at a boundary when near), at
    most `parts` of them; the last says what was left out, if anything was."""
    pieces: list[str] = []
    while text and len(pieces) < parts:
        at = split_point(text, limit)
        pieces.append(text[:at])
        text = text[at:]
    if text:
        pieces[-1] = pieces[-1].rstrip() + f"\n… (cut: {len(text):,} more characters)"
    return pieces or [""]


def message_content(text: str, status: str | None, live: bool = False) -> dict:
    """A message of an answer: the status line above the text so far; `live` while it streams."""
    body = f"{status}\n\n{text}" if status and text else (status or text or "…")
    html = markdown_to_html(text) if text else ""
    content = {"msgtype": "m.text", "body": body}
    if status:
        html = f"<p><em>{escape_html(status)}</em></p>{html}"
    if html and (status or needs_html(text, html)):
        content.update({"format": "org.matrix.custom.html", "formatted_body": html})
    if live:
        content[LIVE] = {}
    return content


RENDER_INLINE = 2_000  # characters rendered on the event loop; a longer text in a thread


async def rendered(text: str, status: str | None, live: bool = False) -> dict:
    """message_content, off the event loop when the text is long: Markdown of a full message
    (~15,000 characters) takes markdown-it 30–100 ms, which would hold every room meanwhile."""
    if len(text) <= RENDER_INLINE:
        return message_content(text, status, live)
    return await asyncio.to_thread(message_content, text, status, live)


class Answer:
    """The Matrix side of one turn's answer. Not stored: the caller stores the finished text."""

    def __init__(self, intent: Intent, room_id: str, title: str, txn_ids: TxnIds | None = None):
        self.intent = intent
        self.room_id = room_id
        self.title = title
        self.event_ids: list[str] = []  # one per message of this answer
        self.done_text: list[str] = []  # text of messages already closed (split)
        self.text = ""  # text of the current message
        self.status: str | None = None
        # shown after the status line's words while there is one: "queued (2)", the context
        # used and the cost (`set_note`; docs/sessions.md)
        self.notes: dict[str, str] = {}
        self.edits = 0
        self._dirty = asyncio.Event()
        self._last_edit = 0.0
        self._first_part = True
        self._pump: asyncio.Task | None = None
        self._posting: asyncio.Task | None = None
        # every send of the answer has a transaction id known in advance, derived from its turn
        # and step: a step repeated after a crash posts nothing twice (recovery.py)
        self.txn_ids = txn_ids or TxnIds(uuid.uuid4().hex)
        self.placeholder_txn = self.txn_ids.placeholder
        # told (no await) when the answer gets a new message, and right before its final text
        # is sent ({event, content, txn}: how to send it again), so its turn record keeps up
        self.on_messages: Callable[[list[str]], None] | None = None
        self.on_final: Callable[[dict], Awaitable[None]] | None = None
        self._complete = False
        self._closing = asyncio.Event()  # finish() was called: the text is complete
        self._news = asyncio.Event()  # a part came or the answer ended
        self._final_posted = False  # the first message carried the final text
        self._send_lock = asyncio.Lock()
        self._open = False  # the current text has a message of its own
        self.finished = False  # the final text is on the homeserver
        # media from the agent not posted yet: (where in `text` it came, how to post it, its tag)
        self._media: list[tuple[int, Callable[[], Awaitable[str]], str]] = []
        self.media_event_ids: list[str] = []
        self._closed = False  # media closed the last message: text after it needs a new one
        # the placeholder was posted by an earlier run (its transaction id given again returns
        # it): it is edited, never taken for the final message (recovery.py)
        self.reused = False
        self._new_txn: str | None = None  # the transaction id of a new message not yet answered
        # what the current message shows, as far as known (None: not known): a live edit that
        # would show the same again is not sent (a status that went A → B → A between two edits)
        self._shown: dict | None = None
        self.split_weight = SPLIT_WEIGHT  # halved when an event did not fit (EventTooLarge)
        self._too_large = False  # the last edit did not fit: split smaller, at once
        self._bytes = 0  # UTF-8 bytes of text taken so far (MAX_ANSWER_BYTES)
        self.cut = False  # the answer passed MAX_ANSWER_BYTES
        self._away = False  # the last edit failed for a homeserver away (5xx, no connection)

    @property
    def full_text(self) -> str:
        return "".join(self.done_text) + self.text

    def post(self, note: str = "", grace: float = 0.0) -> asyncio.Task:
        """Post the placeholder in the background: the prompt does not wait for the homeserver.
        With a `grace`, an agent that is already running gets that long to send its first part,
        which then makes the first message itself (the placeholder covers a start or a wait,
        docs/architecture.md "The Matrix side"); parts that arrive while it is posted go out in the
        first edit. An answer that ends within the grace (and SETTLE after its first part) is posted
        once, final."""

        async def post_it() -> str:
            if grace > 0:
                await _until(self._news, grace)
                if self.text and not self._closing.is_set():  # a first part, not yet the end
                    await _until(self._closing, SETTLE)
            if self._closing.is_set() and not self._media and not self.reused and fits(self.text, self.split_weight):
                return await self._post_final()
            return await self.start(note)

        self._posting = asyncio.create_task(post_it(), name=f"answer-post-{self.room_id}")
        return self._posting

    async def start(self, note: str = "") -> str:
        """Post the placeholder at once; returns its event id."""
        status = f"⏳ {self.title} is getting ready…" + (f" ({note})" if note else "")
        if self.status is None:
            self.status = status
        # a transaction id known in advance: after a crash mid-request the next start asks the
        # homeserver again with it and learns the event id without posting a second message.
        # Text past the split (a huge first part) waits for the edit loop, which splits it.
        head = self.text[: split_point(self.text, self.split_weight)]
        content = await rendered(head, self.status_line, live=True)
        event_id = await self._send(content, self.placeholder_txn)
        self._added(event_id)
        self._open = True
        self._shown = None if self.reused else content  # a reused one shows what it showed then
        self._pump = asyncio.create_task(self._edit_loop(), name=f"answer-edits-{event_id}")
        if head != self.text or self.reused:  # a reused one shows what it showed then
            self._dirty.set()
        return event_id

    async def _post_final(self) -> str:
        """The answer ended before its first message went out: that message is the final one,
        sent with the placeholder's transaction id (recovery knows the answer by it)."""
        self._final_posted = True
        content = await rendered(self.text or "(no answer)", None)
        await self._finishing(None, content, self.placeholder_txn)
        event_id = await self._send(content, self.placeholder_txn)
        self._added(event_id)
        self._open = True
        return event_id

    async def waiting(self, note: str) -> None:
        """Say why the answer has not started (turn or slot), without waiting for the throttle."""
        self.status = f"⏳ {self.title} is getting ready… ({note})"
        self._dirty.set()

    async def show_status(self) -> None:
        """Show the status now, the edit loop stopped (the answer goes no further)."""
        await self._posted()
        async with self._send_lock:
            await self._stop_pump()
            if self.event_ids and not self.finished:
                await self._edit(await rendered(self.text, self.status_line))

    @property
    def status_line(self) -> str | None:
        """The status and its notes, as shown above the text (None: no status line)."""
        if self.status is None:
            return None
        return " · ".join([self.status, *(note for note in self.notes.values() if note)])

    def set_note(self, key: str, note: str | None) -> None:
        """A note after the status line's words (None: none); shown with the next edit."""
        if (note or None) == self.notes.get(key):
            return
        if note:
            self.notes[key] = note
        else:
            self.notes.pop(key, None)
        if self.status is not None:
            self._dirty.set()

    def set_status(self, status: str | None) -> None:
        if status != self.status:
            self.status = status
            self._dirty.set()

    def append(self, chunk: str) -> None:
        if not chunk or self.cut:
            return
        size = len(chunk.encode("utf-8", errors="replace"))
        if self._bytes + size > MAX_ANSWER_BYTES:  # the rest of the answer is dropped
            room = MAX_ANSWER_BYTES - self._bytes
            chunk = chunk.encode("utf-8", errors="replace")[:room].decode("utf-8", errors="ignore")
            chunk += ("" if (self.text + chunk).endswith("\n") or not (self.text + chunk) else "\n") + f"\n{CUT_LINE}"
            self.cut = True
            log.warning("the answer in %s passed %d bytes: the rest is dropped", self.room_id, MAX_ANSWER_BYTES)
        self._bytes += size
        self._news.set()
        self.text += chunk
        self._dirty.set()

    def add_media(self, send: Callable[[], Awaitable[str]], tag: str) -> None:
        """Media at this point of the answer: `send()` posts it (its event id) once the text
        before it has closed its message; `tag` names it in the stored text."""
        self._media.append((len(self.text), send, tag))
        self._news.set()
        self._dirty.set()

    async def _flush_media(self) -> None:
        """Post the media that came, each after the text that came before it (under _send_lock)."""
        while self._media:
            at, send, tag = self._media.pop(0)
            head, self.text = self.text[:at], self.text[at:]
            self._media = [(offset - at, s, t) for offset, s, t in self._media]
            if head or self._open:
                # the text before it closes its message (one that showed only a status says
                # what follows, rather than stay empty)
                await self._edit(await rendered(head or tag, None))
            self.done_text.append(f"{head}\n{tag}\n" if head and not head.endswith("\n") else f"{head}{tag}\n")
            self._open = False
            self._shown = None
            self._closed = True
            try:
                self.media_event_ids.append(await send())
            except Exception as exc:  # said in the answer; the rest of it goes on
                log.warning("%s could not be posted in %s: %s", tag, self.room_id, exc)
                note = f"⚠️ {tag} could not be posted: {exc}\n\n"
                self.text = note + self.text
                self._media = [(offset + len(note), s, t) for offset, s, t in self._media]

    async def _posted(self) -> None:
        if self._posting is not None:
            try:
                await self._posting
            except Exception:  # not posted: the final text goes out as a new message
                log.warning("the placeholder in %s was not posted", self.room_id)

    async def finish(self, footer: str | None = None, complete: bool = False) -> list[str]:
        """Final edit(s) without status line; returns the event ids of the answer's messages.
        AnswerNotFinished when the homeserver took no final text after FINAL_ATTEMPTS (or,
        while it is away, FINAL_PATIENCE).
        `complete`: the agent finished it — its final send is told to `on_final` first (an
        answer ended early, stopped or cut, is not: if that send is lost, it is interrupted)."""
        self._complete = complete
        if footer:
            self.text = f"{self.text}\n\n{footer}" if self.text else footer
        self._closing.set()  # a first message still waiting to go out goes out final
        self._news.set()
        await self._posted()
        if self._final_posted and self.event_ids:
            self.finished = True
            return list(self.event_ids)
        async with self._send_lock:
            # an edit in flight is never cancelled: a cancelled request may still land on the
            # homeserver after the final edit and leave a status line showing
            await self._stop_pump()
            # only now the status goes: an edit of the loop never shows the text without it, so
            # nothing looks finished before the final send (and its record, journal.py) is made
            self.status = None
            final: dict | None = None
            attempt, began = 0, time.monotonic()
            while True:
                split = await self._split_if_needed()
                content = await rendered(self.text or "(no answer)", None)
                if content != final:  # the same final text is sent again with the same id
                    final, final_txn = content, self.txn_ids.next()
                if split and (
                    (self._closed and not self.text)  # nothing after the last media: no message
                    or await self._edit(final, final_txn, finishing=True)
                ):
                    self.finished = True
                    return list(self.event_ids) + self.media_event_ids
                if self._shrunk():
                    continue  # it did not fit: split smaller and try again at once
                attempt += 1
                away = self._away and time.monotonic() - began < FINAL_PATIENCE
                if attempt >= FINAL_ATTEMPTS and not away:
                    break
                await asyncio.sleep(min(FINAL_RETRY_MAX, FINAL_RETRY * attempt))
        raise AnswerNotFinished(f"the final text of the answer in {self.room_id} could not be sent")

    async def _stop_pump(self) -> None:
        if self._pump is not None:  # it never fails; if it did, the final edit carries everything
            pump, self._pump = self._pump, None
            await stop_task(pump, log, f"the edit loop in {self.room_id}")

    async def _edit_loop(self) -> None:
        while True:
            await self._dirty.wait()
            if not self._first_part:
                wait = self._last_edit + edit_interval(self.edits) - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            self._dirty.clear()
            if self.edits >= MAX_EDITS - 1:
                continue  # keep the last edit for the final text
            async with self._send_lock:
                if await self._split_if_needed():
                    if not (self._closed and not self.text):  # a status alone opens no message
                        if (
                            not await self._edit(await rendered(self.text, self.status_line, live=True))
                            and self._shrunk()
                        ):
                            self._dirty.set()  # it did not fit: split smaller at the next edit
            if self.text:
                self._first_part = False

    async def _split_if_needed(self) -> bool:
        """Post the media that came, then close the current message at split_weight while the
        text is longer; the rest goes into a new message (sent by the next edit). False if a
        message could not be closed: nothing is lost, the next edit tries again."""
        await self._flush_media()
        while not fits(self.text, self.split_weight):
            at = split_point(self.text, self.split_weight)
            head = self.text[:at]
            if not await self._edit(await rendered(head, None)):
                if self._shrunk():
                    continue
                return False
            self.text = self.text[at:]
            self.done_text.append(head)
            self._open = False
            self._shown = None
            self.edits = 0
        return True

    def _shrunk(self) -> bool:
        """After an edit that did not fit: split at half the size from now on (True), unless
        already at the least (False: it counts as a failed edit)."""
        if not self._too_large or self.split_weight <= MIN_SPLIT_WEIGHT:
            return False
        self._too_large = False
        self.split_weight = max(MIN_SPLIT_WEIGHT, self.split_weight // 2)
        log.info("an event of the answer in %s did not fit: split at %d from now on", self.room_id, self.split_weight)
        return True

    async def _send(self, content: dict, tx_id: str | None = None) -> str:
        """A new message of this answer; its event id."""
        return await self.intent.send(self.room_id, content, txn_id=tx_id or self.txn_ids.next())

    async def _replace(self, event_id: str, new: dict, txn_id: str | None = None) -> str:
        """An edit of one of this answer's messages."""
        return await self.intent.edit(self.room_id, event_id, new, txn_id=txn_id or self.txn_ids.next())

    def _added(self, event_id: str) -> None:
        self.event_ids.append(event_id)
        if self.on_messages is not None:
            self.on_messages(list(self.event_ids))

    async def _finishing(self, event_id: str | None, content: dict, txn_id: str) -> None:
        if self.on_final is not None and self._complete:
            await self.on_final(
                {
                    "event": event_id,
                    "content": content,
                    "txn": txn_id,
                    "text": self.full_text,
                    "answer": list(self.event_ids),
                }
            )

    async def _edit(self, new: dict, txn_id: str | None = None, finishing: bool = False) -> bool:
        """Show `new` as the current message: an edit, or a new message when the current text
        has none yet (the placeholder never got out, or the answer was just split). False if
        the homeserver did not take it: one failed edit must not end the turn; the next one
        carries it all."""
        if not finishing and self._open and self._shown is not None and new == self._shown:
            return True  # it shows that already
        ok = False
        self._too_large = self._away = False
        try:
            if not self._open:  # the placeholder never got out, split, or media came last
                # one transaction id per new message until the homeserver answers: a send that
                # landed but whose answer was lost (the homeserver killed) is not posted twice.
                # The first message's is the placeholder's (recovery knows it by that).
                again = self._new_txn is not None
                if self._new_txn is None:
                    self._new_txn = self.placeholder_txn if not self.event_ids else (txn_id or self.txn_ids.next())
                    again = self.reused or (not self.event_ids and self._posting is not None)
                if finishing:
                    await self._finishing(None, new, self._new_txn)
                event_id = await self._send(new, self._new_txn)
                self._new_txn = None
                self._added(event_id)
                self._open = True
                self._closed = False
                self.edits = 0
                self._shown = None
                if again:  # an earlier try may have posted it with older content: show this
                    await self._replace(event_id, new)
                self._shown = new
                return True
            if finishing:
                await self._finishing(self.event_ids[-1], new, txn_id or "")
            await self._replace(self.event_ids[-1], new, txn_id)
            self._shown = new
            ok = True
        except EventTooLarge as exc:  # nothing was sent: the caller splits smaller
            self._too_large = True
            log.warning("edit too large in %s: %s", self.room_id, exc)
        except (TimeoutError, MatrixError, aiohttp.ClientError) as exc:
            self._away = not isinstance(exc, MatrixError) or exc.transient
            log.warning("edit failed in %s: %s", self.room_id, exc)
        except Exception:
            log.exception("edit failed in %s", self.room_id)
        self.edits += 1
        self._last_edit = time.monotonic()
        return ok


async def _until(event: asyncio.Event, timeout: float) -> None:
    """Wait for `event`, at most `timeout` seconds."""
    if not event.is_set():
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
