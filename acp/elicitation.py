"""Elicitation: an agent asks the person for structured input (pure: no I/O).

ACP (`elicitation/create`, an agent → client request; the schema's `CreateElicitationRequest`,
marked unstable, modelled on MCP's elicitation):

* params: `mode` "form" {requestedSchema} or "url" {elicitationId, url}, `message`, and the
  scope: `sessionId` (+ optional `toolCallId`) or `requestId`;
* requestedSchema: {type: "object", properties: {name: {type: string | number | integer |
  boolean | array, title, description, default, minLength, maxLength, pattern, format, minimum,
  maximum, enum, oneOf: [{const, title}], items: {enum} | {anyOf: [{const, title}]}, minItems,
  maxItems}}, required: [names]} — flat, primitive fields only;
* the answer: {action: "accept", content: {name: value}} | {action: "decline"} |
  {action: "cancel"}; for URL mode "accept" means the person consented to open the URL; the
  agent may later send the `elicitation/complete` notification {elicitationId} once the person
  finished there (ids unknown or completed already are ignored): the client sets the request's
  `completed` event (acp/client.py), which the one asking may wait for;
* the client announces `clientCapabilities.elicitation` {form: {}, url: {}}.

`parse_request()` turns params into an `ElicitationRequest`; `parse_answer()` reads a person's
reply to the numbered questions (see its docstring) into the content to send.
"""

from __future__ import annotations

import asyncio
import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any

import re2

ACCEPT, DECLINE, CANCEL = "accept", "decline", "cancel"
FIELD_TYPES = ("string", "number", "integer", "boolean", "array")
LETTERS = "abcdefghijklmnopqrstuvwxyz"
TRUE_WORDS = {"yes", "y", "true", "on", "1", "ok"}
FALSE_WORDS = {"no", "n", "false", "off", "0"}


@dataclass(frozen=True)
class Option:
    value: str
    title: str


@dataclass(frozen=True)
class Field:
    name: str
    type: str = "string"
    title: str = ""
    description: str = ""
    required: bool = False
    default: Any = None
    options: tuple[Option, ...] = ()  # string enum / oneOf, array items
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    format: str | None = None
    min_items: int | None = None
    max_items: int | None = None

    @property
    def label(self) -> str:
        return self.title or self.name


@dataclass(frozen=True)
class ElicitationRequest:
    mode: str  # form | url
    message: str
    session_id: str | None = None
    tool_call_id: str | None = None
    fields: tuple[Field, ...] = ()  # form
    url: str = ""  # url
    elicitation_id: str = ""  # url
    raw: dict[str, Any] = field(default_factory=dict)
    # url: set when the agent sends elicitation/complete for it (acp/client.py); None: never
    completed: asyncio.Event | None = field(default=None, compare=False, repr=False)

    @property
    def host(self) -> str | None:
        return url_host(self.url)

    @property
    def link(self) -> str | None:
        """The URL as it is offered to the person (normalised, see safe_link), or None."""
        safe = safe_link(self.url)
        return safe[0] if safe else None


@dataclass(frozen=True)
class ElicitationAnswer:
    action: str  # accept | decline | cancel
    content: dict[str, Any] | None = None

    def to_result(self) -> dict[str, Any]:
        if self.action == ACCEPT:
            result: dict[str, Any] = {"action": ACCEPT}
            if self.content is not None:
                result["content"] = self.content
            return result
        return {"action": self.action if self.action in (DECLINE, CANCEL) else CANCEL}


class BadElicitation(ValueError):
    """Params that are not an elicitation this client can show; str() is one line."""


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


_AUTHORITY = re.compile(r"(?P<scheme>https?)://(?P<authority>[^/?#]*)(?P<rest>[/?#].*)?", re.IGNORECASE | re.DOTALL)
_IPV6 = re.compile(r"\[[0-9a-fA-F:.]+\]")
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
# characters a browser reads otherwise than a parser might (a backslash is a slash to it; tabs
# and newlines are dropped) or that break out of an attribute or of Markdown: never in a link
_REFUSED = frozenset("\\\"'<>`{}|^ ")


def safe_link(url: Any) -> tuple[str, str] | None:
    """(the link, its host) when `url` is an http(s) URL whose host reads the same to a browser
    (WHATWG URL parsing) and to the person it is shown to; else None. Refused: anything but
    printable ASCII (no Unicode host: an agent sends its punycode), backslashes, quotes, `<>`
    and the like, userinfo (`user@`: the text before the @ is what a reader takes for the
    host), a percent-encoded or empty host, a host whose last label is a number but which is
    not a plain dotted-quad IPv4 address (`0x7f.1` is 127.0.0.1 to a browser), a bad port.
    The link is the URL with its scheme and host in lower case."""
    if not isinstance(url, str) or not url or len(url) > 4096:
        return None
    if any(not 0x21 <= ord(char) <= 0x7E or char in _REFUSED for char in url):
        return None
    match = _AUTHORITY.fullmatch(url)
    if match is None:
        return None
    authority = match.group("authority")
    if "@" in authority or "%" in authority:
        return None
    if authority.startswith("["):
        close = authority.find("]") + 1
        host, port = authority[:close], authority[close:]
        if not close or not _IPV6.fullmatch(host) or (port and not port.startswith(":")):
            return None
        port = port[1:]
    else:
        host, _, port = authority.partition(":")
        if ":" in port:
            return None
        host = host.lower()
        labels = host.split(".")
        if not host or not all(_LABEL.fullmatch(label) for label in labels):
            return None
        if labels[-1].isdigit() or re.fullmatch(r"0x[0-9a-f]*", labels[-1]):  # an IPv4 address to a browser
            if len(labels) != 4 or not all(p.isdigit() and str(int(p)) == p and int(p) <= 255 for p in labels):
                return None
    if port and (not port.isdigit() or int(port) > 65535):
        return None
    scheme = match.group("scheme").lower()
    authority = host.lower() + (f":{port}" if port else "")
    return f"{scheme}://{authority}{match.group('rest') or '/'}", host.lower()


def url_host(url: str) -> str | None:
    """The host of an http(s) URL a browser would open (safe_link), else None: nothing else is
    offered to the person."""
    safe = safe_link(url)
    return safe[1] if safe else None


_URL_IN_TEXT = re.compile(r"https?://[^\s<>\"'`]+", re.IGNORECASE)
LINKS_IN_TEXT = 8  # links read from one text, at most


def links_in(text: str) -> list[str]:
    """The http(s) links a line of text shows (an agent's stderr during a login prints the page
    to open there), each as safe_link offers it, in order, without repeats; a link ends before
    whitespace, quotes or `<>`, and without the punctuation that closes a sentence around it."""
    found: list[str] = []
    for match in _URL_IN_TEXT.finditer(text[:65536]):
        safe = safe_link(match.group().rstrip(".,;:!?)]}"))
        if safe is not None and safe[0] not in found:
            found.append(safe[0])
            if len(found) == LINKS_IN_TEXT:
                break
    return found


def _options(schema: dict[str, Any]) -> tuple[Option, ...]:
    if isinstance(schema.get("oneOf"), list) or isinstance(schema.get("anyOf"), list):
        items = schema.get("oneOf") if isinstance(schema.get("oneOf"), list) else schema["anyOf"]
        return tuple(
            Option(str(i["const"]), str(i.get("title") or i["const"]))
            for i in items
            if isinstance(i, dict) and isinstance(i.get("const"), str)
        )
    if isinstance(schema.get("enum"), list):
        return tuple(Option(v, v) for v in schema["enum"] if isinstance(v, str))
    return ()


def parse_fields(schema: Any) -> tuple[Field, ...]:
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        raise BadElicitation("the form has no fields (requestedSchema.properties)")
    required = (
        set(n for n in schema.get("required") or [] if isinstance(n, str))
        if isinstance(schema.get("required"), list)
        else set()
    )
    fields = []
    for name, prop in schema["properties"].items():
        if not isinstance(prop, dict):
            raise BadElicitation(f"field {name!r} is not a schema")
        kind = prop.get("type")
        if kind not in FIELD_TYPES:
            raise BadElicitation(f"field {name!r} has type {kind!r}, not one of {', '.join(FIELD_TYPES)}")
        items = prop.get("items") if isinstance(prop.get("items"), dict) else {}
        options = _options(items if kind == "array" else prop)
        if kind == "array" and not options:
            raise BadElicitation(f"field {name!r} is a list without choices")
        fields.append(
            Field(
                name=str(name),
                type=kind,
                title=_str(prop.get("title")) or "",
                description=_str(prop.get("description")) or "",
                required=name in required,
                default=prop.get("default"),
                options=options,
                minimum=_num(prop.get("minimum")),
                maximum=_num(prop.get("maximum")),
                min_length=_int(prop.get("minLength")),
                max_length=_int(prop.get("maxLength")),
                pattern=_str(prop.get("pattern")),
                format=_str(prop.get("format")),
                min_items=_int(prop.get("minItems")),
                max_items=_int(prop.get("maxItems")),
            )
        )
    if not fields:
        raise BadElicitation("the form has no fields")
    return tuple(fields)


def parse_request(params: Any) -> ElicitationRequest:
    """elicitation/create params → ElicitationRequest. Raises BadElicitation."""
    if not isinstance(params, dict):
        raise BadElicitation("elicitation params are not an object")
    mode = params.get("mode")
    message = _str(params.get("message")) or ""
    scope = {"session_id": _str(params.get("sessionId")), "tool_call_id": _str(params.get("toolCallId"))}
    if mode == "form":
        return ElicitationRequest(
            "form", message, fields=parse_fields(params.get("requestedSchema")), raw=params, **scope
        )
    if mode == "url":
        url, ident = _str(params.get("url")), _str(params.get("elicitationId"))
        if not url or not ident:
            raise BadElicitation("a URL elicitation needs url and elicitationId")
        return ElicitationRequest("url", message, url=url, elicitation_id=ident, raw=params, **scope)
    raise BadElicitation(f"unknown elicitation mode {mode!r}")


# --- reading the person's reply ----------------------------------------------------------

_NUMBERED = re.compile(r"^\s*(\d{1,2})\s*[.):]\s*(.*)$")
_NAMED = re.compile(r"^\s*([A-Za-z_][\w-]*)\s*[:=]\s*(.*)$")


def _pick(options: tuple[Option, ...], text: str, allow_number: bool) -> Option | str:
    """An option by letter, value or title (a unique prefix too); a message if none."""
    wanted = text.strip()
    if re.fullmatch(r"[A-Za-z\d]{1,2}[.)]", wanted):  # "b)" or "2." as in the question
        wanted = wanted[:-1]
    low = wanted.lower()
    if len(low) == 1 and low in LETTERS[: len(options)]:
        return options[LETTERS.index(low)]
    if allow_number and low.isdigit() and 1 <= int(low) <= len(options):
        return options[int(low) - 1]
    for test in (lambda o: o.value == wanted, lambda o: o.value.lower() == low, lambda o: o.title.lower() == low):
        found = [o for o in options if test(o)]
        if len(found) == 1:
            return found[0]
    found = [o for o in options if o.value.lower().startswith(low) or o.title.lower().startswith(low)]
    if len(found) == 1 and low:
        return found[0]
    listed = ", ".join(f"{LETTERS[i]}) {o.title}" for i, o in enumerate(options))
    return f"{wanted!r} is not one of {listed}"


def parse_value(f: Field, text: str) -> Any:
    """One field's value from text; raises ValueError with a readable message."""
    text = text.strip()
    if f.type == "boolean":
        if text.lower() in TRUE_WORDS:
            return True
        if text.lower() in FALSE_WORDS:
            return False
        raise ValueError(f"{f.label}: answer yes or no")
    if f.type in ("number", "integer"):
        try:
            value: Any = int(text) if f.type == "integer" else float(text)
        except ValueError:
            raise ValueError(
                f"{f.label}: {text!r} is not {'a whole number' if f.type == 'integer' else 'a number'}"
            ) from None
        if f.type == "number" and not math.isfinite(value):
            raise ValueError(f"{f.label}: {text!r} is not a number")
        if f.minimum is not None and value < f.minimum:
            raise ValueError(f"{f.label}: at least {f.minimum:g}")
        if f.maximum is not None and value > f.maximum:
            raise ValueError(f"{f.label}: at most {f.maximum:g}")
        return value
    if f.type == "array":
        picked = []
        for part in filter(None, (p.strip() for p in re.split(r"[,\s]+", text))):
            option = _pick(f.options, part, allow_number=True)
            if isinstance(option, str):
                raise ValueError(f"{f.label}: {option}")
            if option.value not in picked:
                picked.append(option.value)
        if f.min_items is not None and len(picked) < f.min_items:
            raise ValueError(f"{f.label}: choose at least {f.min_items}")
        if f.max_items is not None and len(picked) > f.max_items:
            raise ValueError(f"{f.label}: choose at most {f.max_items}")
        return picked
    if f.options:
        option = _pick(f.options, text, allow_number=True)
        if isinstance(option, str):
            raise ValueError(f"{f.label}: {option}")
        return option.value
    if f.min_length is not None and len(text) < f.min_length:
        raise ValueError(f"{f.label}: at least {f.min_length} characters")
    if f.max_length is not None and len(text) > f.max_length:
        raise ValueError(f"{f.label}: at most {f.max_length} characters")
    if f.pattern and pattern_matches(f.pattern, text) is False:
        raise ValueError(f"{f.label}: {text!r} does not have the expected form")
    return text


MAX_PATTERN = 2_000  # characters of an agent's pattern; a longer one is not checked


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str):
    options = re2.Options()
    options.max_mem = 1 << 20  # 1 MiB of automaton: a pattern that needs more is not checked
    options.log_errors = False
    return re2.compile(pattern, options)


def pattern_matches(pattern: str, text: str) -> bool | None:
    """Whether `text` has the form of the agent's `pattern` (JSON Schema: not anchored), or None
    when the pattern cannot be used (too long, not valid, or needing what a linear-time engine
    lacks: back-references, look-around) — an agent's broken pattern is not the person's fault.

    The agent wrote the pattern: it runs on RE2 (google-re2), whose time is linear in the text
    whatever the pattern, so `^(a+)+$` cannot hold the event loop as Python's `re` would."""
    if len(pattern) > MAX_PATTERN:
        return None
    try:
        return _compiled(pattern).search(text) is not None
    except (re2.error, ValueError, TypeError):
        return None


def parse_answer(fields: tuple[Field, ...], reply: str) -> tuple[dict[str, Any], list[str]]:
    """The content for `fields` from a person's reply, and the problems (none: send it).

    The reply gives one line per field: `N. value` (N is the field's number), `name: value`,
    or — when no line is numbered or named — the values in the fields' order. With one field
    the whole reply is its value. A choice is its letter, its value or its title (or its number
    when the field has choices); yes/no for booleans; `-` leaves an optional field empty. An
    empty field takes its default when it has one.
    """
    lines = [line for line in reply.replace("\r", "").split("\n") if line.strip()]
    given: dict[str, str] = {}
    problems: list[str] = []
    by_name = {f.name.lower(): f for f in fields}
    if len(fields) == 1:
        first = _NUMBERED.match(lines[0]) if len(lines) == 1 else None
        numbered_one = first is not None and first.group(1) == "1" and first.group(2).strip()
        given[fields[0].name] = first.group(2) if numbered_one else " ".join(line.strip() for line in lines)
    else:
        loose = []
        for line in lines:
            numbered, named = _NUMBERED.match(line), _NAMED.match(line)
            if numbered and 1 <= int(numbered.group(1)) <= len(fields):
                given[fields[int(numbered.group(1)) - 1].name] = numbered.group(2)
            elif named and named.group(1).lower() in by_name:
                given[by_name[named.group(1).lower()].name] = named.group(2)
            else:
                loose.append(line)
        if loose and not given and len(loose) <= len(fields):
            given = {f.name: text for f, text in zip(fields, loose)}
        elif loose:
            problems.append(f"could not read: {loose[0].strip()!r} (write `N. answer`, one line per question)")
    content: dict[str, Any] = {}
    for f in fields:
        text = given.get(f.name, "").strip()
        if text in ("", "-"):
            if f.default is not None and text == "":
                content[f.name] = f.default
            elif f.required:
                problems.append(f"{f.label}: an answer is needed")
            continue
        try:
            content[f.name] = parse_value(f, text)
        except ValueError as exc:
            problems.append(str(exc))
    return content, problems
