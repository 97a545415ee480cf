"""Agent Markdown → sanitised Matrix HTML.

markdown-it-py renders CommonMark (+ tables, strikethrough); nh3 (ammonia) then keeps only the
tags and attributes the Matrix spec lists for `org.matrix.custom.html`, so an agent can never
put a script, an iframe, an event handler or a javascript: link in front of the owner.
Images load from the owner's homeserver only (`mxc://`): an `<img>` from any other place (an
http(s) tracking pixel, rendered by the client the moment the answer arrives) is replaced by
its alt text.
"""

from __future__ import annotations

import html as html_module
import re

import nh3
from markdown_it import MarkdownIt

# The HTML subset of the Matrix client-server spec (m.room.message, org.matrix.custom.html).
ALLOWED_TAGS = {
    "font",
    "del",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "blockquote",
    "p",
    "a",
    "ul",
    "ol",
    "sup",
    "sub",
    "li",
    "b",
    "i",
    "u",
    "strong",
    "em",
    "s",
    "code",
    "hr",
    "br",
    "div",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "caption",
    "pre",
    "span",
    "img",
    "details",
    "summary",
}
ALLOWED_ATTRIBUTES = {
    "font": {"data-mx-bg-color", "data-mx-color", "color"},
    "span": {"data-mx-bg-color", "data-mx-color", "data-mx-spoiler"},
    "a": {"href", "target"},
    "img": {"width", "height", "alt", "title", "src"},
    "ol": {"start"},
    "code": {"class"},
}
URL_SCHEMES = {"http", "https", "ftp", "mailto", "magnet", "mxc"}

_markdown = MarkdownIt("commonmark", {"html": True, "linkify": False, "breaks": True}).enable(
    ["table", "strikethrough"]
)


IMAGE_SCHEMES = ("mxc://",)
# nh3 writes tags back in one canonical form: `<img` + ` name="value"` attributes, values escaped
_IMG = re.compile(r"<img\b([^>]*)>")
_ALT = re.compile(r'\salt="([^"]*)"')


def _only_mxc_images(tag: str, attribute: str, value: str) -> str | None:
    if tag == "img" and attribute == "src" and not value.lower().startswith(IMAGE_SCHEMES):
        return None
    return value


def _alt_for_sourceless(match: re.Match[str]) -> str:
    attributes = match.group(1)
    if re.search(r'\ssrc="', attributes):
        return match.group(0)
    alt = _ALT.search(attributes)
    return html_module.escape(html_module.unescape(alt.group(1)), quote=False) if alt else ""


def sanitise(html: str) -> str:
    cleaned = nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener",
        strip_comments=True,
        attribute_filter=_only_mxc_images,
    )
    return _IMG.sub(_alt_for_sourceless, cleaned)


def markdown_to_html(text: str) -> str:
    """Render an agent's Markdown to HTML safe to send as `formatted_body`."""
    return sanitise(_markdown.render(text)).strip()


def needs_html(text: str, html: str) -> bool:
    """Plain text renders as one bare paragraph: then sending HTML adds nothing."""
    return html != f"<p>{escape_html(text).replace(chr(10), '<br>' + chr(10))}</p>"


def escape_html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
