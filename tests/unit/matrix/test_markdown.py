"""Agent Markdown becomes sanitised Matrix HTML; streamed edits stay under the event size limit."""

from __future__ import annotations

from bridge.channels.base.stream import (
    MAX_NOTICE_PARTS,
    SPLIT_WEIGHT,
    edit_interval,
    message_content,
    notice_parts,
    split_point,
)
from bridge.matrix.intent import weight
from bridge.matrix.markdown import markdown_to_html, needs_html


def test_markdown_is_rendered():
    html = markdown_to_html("**bold** and `code`\n\n- one\n- two\n\n| a | b |\n|---|---|\n| 1 | 2 |")
    assert "<strong>bold</strong>" in html and "<code>code</code>" in html
    assert "<li>one</li>" in html and "<table>" in html


def test_dangerous_html_is_removed():
    html = markdown_to_html(
        '<script>alert(1)</script><iframe src="http://x"></iframe>'
        '<img src="x" onerror="alert(1)"><a href="javascript:alert(1)">x</a>'
        '<b onclick="evil()">b</b> [y](javascript:alert(2))'
    )
    for bad in ("<script", "alert(1)</script", "<iframe", "onerror", "onclick", 'href="javascript:'):
        assert bad not in html, (bad, html)
    assert "javascript:" not in "".join(part for part in html.split('"') if part.startswith("java"))
    assert "<b>b</b>" in html


def test_plain_text_needs_no_html():
    assert not needs_html("just words", markdown_to_html("just words"))
    assert needs_html("*some* words", markdown_to_html("*some* words"))


def test_status_line_shows_above_the_text_and_goes_in_the_final():
    streaming = message_content("partial **text**", "✍️ writing…")
    assert streaming["body"].startswith("✍️ writing…\n\npartial")
    assert "<em>✍️ writing…</em>" in streaming["formatted_body"]
    final = message_content("partial **text**", None)
    assert final["body"] == "partial **text**" and "writing" not in final["formatted_body"]


def test_split_point_keeps_messages_under_the_limit_at_a_boundary():
    text = ("word " * 2000 + "\n\n") * 4
    at = split_point(text)
    assert weight(text[:at]) <= SPLIT_WEIGHT and text[:at].endswith(("\n", " "))
    # the limit is the text's weight in an event's JSON: é is \u00e9 (6), 😀 a surrogate pair (12)
    for wide in ("é" * 20000, "😀" * 5000, '"\\' * 9000, "\x01" * 9000):
        at = split_point(wide)
        assert 0 < at < len(wide) and SPLIT_WEIGHT * 0.95 < weight(wide[:at]) <= SPLIT_WEIGHT
    assert split_point("short") == 5


def test_a_long_notice_goes_in_parts_that_fit_and_an_endless_one_says_it_was_cut():
    assert notice_parts("hello") == ["hello"]
    text = "line of text\n" * 4000  # ~56,000 in weight: four parts
    parts = notice_parts(text)
    assert len(parts) == 4 and "".join(parts) == text
    assert all(weight(part) <= SPLIT_WEIGHT for part in parts)
    endless = notice_parts("x " * 1_000_000)
    assert len(endless) == MAX_NOTICE_PARTS and endless[-1].endswith("more characters)")
    assert all(weight(part) <= SPLIT_WEIGHT + 100 for part in endless)


def test_edits_slow_down_as_a_message_grows():
    assert edit_interval(0) == 0.5
    assert edit_interval(50) > edit_interval(10) > edit_interval(0)


def test_images_load_only_from_the_homeserver():
    # an http(s) image is a tracking pixel the moment the client renders the answer
    html = markdown_to_html(
        "![pixel](https://tracker.example/p.gif?who=owner) and "
        '<img src="http://tracker.example/q.png" alt="q"> and '
        '<img src="//tracker.example/r.png"> and ![cat](mxc://hs.example/abc)'
    )
    assert "tracker.example" not in html, html
    assert '<img src="mxc://hs.example/abc" alt="cat">' in html
    assert "pixel and q and" in html  # what the dropped images said instead, as text
    assert html.count("<img") == 1


def test_an_image_alt_text_stays_text():
    html = markdown_to_html('<img src="https://x.example/a.png" alt="&lt;b&gt;bold&lt;/b&gt; &amp; co">')
    assert "x.example" not in html and "<b>" not in html
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; co" in html
