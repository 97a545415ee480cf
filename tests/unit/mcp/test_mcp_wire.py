"""The lines `sidekicks mcp` and the bridge exchange (bridge/mcp/wire.py)."""

import pytest

from bridge.mcp.wire import BadRequest, read_reply, read_request, reply_line, request_line


def test_a_request_and_its_reply_go_through():
    request = read_request(request_line("s3cret", "history", {"limit": 2}))
    assert (request.secret, request.tool, request.arguments) == ("s3cret", "history", {"limit": 2})
    assert read_reply(reply_line("done ✅")) == ("done ✅", False)
    assert read_reply(reply_line("no", error=True)) == ("no", True)


@pytest.mark.parametrize(
    "line",
    [b"not json\n", b"[]\n", b'{"tool": "history"}\n', b'{"secret": "s", "tool": "h", "arguments": [1]}\n', b"\xff\n"],
)
def test_a_bad_request_is_refused(line):
    with pytest.raises(BadRequest):
        read_request(line)


def test_an_unreadable_reply_is_an_error_result():
    assert read_reply(b"garbage") == ("the bridge sent an unreadable answer", True)
    assert read_reply(b'{"text": 3}') == ("the bridge sent an unreadable answer", True)
