"""URLs an agent asks the person to open (acp/elicitation.py safe_link, bridge/coding/render.py
url_consent / url_link), pure: the host shown is the host a browser opens, or nothing is offered."""

from __future__ import annotations

import re

import pytest

from acp.elicitation import links_in, parse_request, safe_link, url_host
from bridge.coding import render


def request(url: str):
    return parse_request({"mode": "url", "message": "Log in", "url": url, "elicitationId": "e1", "sessionId": "s"})


@pytest.mark.parametrize(
    "url, link, host",
    [
        (
            "https://login.example.com/auth?x=1&y=2#top",
            "https://login.example.com/auth?x=1&y=2#top",
            "login.example.com",
        ),
        ("HTTPS://Login.Example.COM", "https://login.example.com/", "login.example.com"),
        ("http://127.0.0.1:8080/cb", "http://127.0.0.1:8080/cb", "127.0.0.1"),
        ("https://[::1]:8443/x", "https://[::1]:8443/x", "[::1]"),
        ("https://xn--bcher-kva.example/", "https://xn--bcher-kva.example/", "xn--bcher-kva.example"),
        ("https://a.example/path%20with%20escapes", "https://a.example/path%20with%20escapes", "a.example"),
    ],
)
def test_plain_http_urls_are_offered_with_their_host(url, link, host):
    assert safe_link(url) == (link, host)
    assert url_host(url) == host


@pytest.mark.parametrize(
    "url",
    [
        # a backslash is a slash to a browser: Python's parser says evil.example, the browser opens trusted
        "https://trusted.example\\@evil.example/",
        "https://evil.example\\.trusted.example/",
        # userinfo: the reader takes the part before @ for the host
        "https://trusted.example@evil.example/",
        "https://trusted.example:pw@evil.example/",
        # quotes and angle brackets break out of the href attribute
        'https://evil.example/" onclick="x',
        "https://evil.example/' x='",
        "https://evil.example/<script>",
        "https://evil.example/`",
        # whitespace and controls a browser strips or stops at
        "https://trusted.example/\nhttps://evil.example",
        "https://tru\tsted.example/",
        " https://trusted.example/",
        "https://trusted.example/ evil",
        "https://trusted.example\x00.evil.example/",
        # hosts a browser reads otherwise
        "https://%65vil.example/",
        "https://0x7f.1/",
        "https://2130706433/",
        "https://127.1/",
        "https://0177.0.0.1/",
        "https://trusted.example./",
        "https://trusted..example/",
        "https://bücher.example/",  # Unicode: homographs; the agent sends its punycode
        "https://раураl.com/",
        "https://trusted.example:99999/",
        "https://trusted.example:80:80/",
        "https://[::1/",
        "https:///path",
        "https://",
        # not http(s)
        "javascript:alert(1)",
        "file:///etc/passwd",
        "data:text/html,hi",
        "ftp://a.example/",
        "//evil.example/",
        "https:evil.example",
        "http:/evil.example",
        "",
        "x" * 5000,
        None,
        7,
    ],
)
def test_hostile_urls_are_refused(url):
    assert safe_link(url) is None and url_host(url) is None


def test_the_consent_question_and_the_link_show_the_host_the_link_opens():
    req = request("https://Login.Example.com/auth?next=/a&b=1")
    consent = render.url_consent("Alice", req)
    assert "login.example.com" in consent.body and "login.example.com" in consent.html
    link = render.url_link(req)
    href = re.search(r'href="([^"]*)"', link.html).group(1)
    assert href == "https://login.example.com/auth?next=/a&amp;b=1"  # escaped in the attribute
    assert re.search(r">([^<]*)</a>", link.html).group(1) == "login.example.com"
    assert link.body == "Open: https://login.example.com/auth?next=/a&b=1"


@pytest.mark.parametrize(
    "url",
    [
        'https://trusted.example/" href="https://evil.example',
        "https://trusted.example\\@evil.example/",
        "https://trusted.example@evil.example/",
    ],
)
def test_a_hostile_url_is_never_linked(url):
    req = request(url)
    assert "evil" not in render.url_consent("Alice", req).html
    link = render.url_link(req)
    assert "href" not in link.html and "evil" not in link.body and "not shown" in link.body


def test_the_links_a_line_shows_are_read_as_a_browser_opens_them():
    line = "Open (https://Auth.Example.com/device?code=AB-12). Or https://b.example/x, or https://b.example/x."
    assert links_in(line) == ["https://auth.example.com/device?code=AB-12", "https://b.example/x"]
    assert links_in("go to 'https://a.example/p' then \"http://127.0.0.1:1455/cb\"") == [
        "https://a.example/p",
        "http://127.0.0.1:1455/cb",
    ]
    assert links_in("https://trusted.example@evil.example/ ftp://x.example/ no link") == []
    assert len(links_in(" ".join(f"https://h{n}.example/" for n in range(50)))) == 8
