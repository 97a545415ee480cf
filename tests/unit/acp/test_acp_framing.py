"""Pure tests of acp.framing: no processes, no event loop."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from acp import framing
from acp.framing import LineBuffer, ParseError


def test_lines_split_across_chunks():
    buf = LineBuffer()
    assert buf.feed(b'{"a":') == []
    assert buf.pending == 5
    assert buf.feed(b'1}\n{"b"') == [b'{"a":1}']
    assert buf.feed(b":2}\r\n\n") == [b'{"b":2}', b""]
    assert buf.pending == 0
    assert buf.close() is None


def test_unterminated_tail_is_returned_at_close():
    buf = LineBuffer()
    buf.feed(b"abc\nde")
    buf.feed(b"f")
    assert buf.close() == b"def"
    assert buf.close() is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=20),
    st.lists(st.integers(min_value=1, max_value=17), min_size=1, max_size=30),
)
def test_any_chunking_gives_the_same_lines(lines, cuts):
    data = b"".join(line + b"\n" for line in lines)
    buf, out, pos, i = LineBuffer(), [], 0, 0
    while pos < len(data):
        step = cuts[i % len(cuts)]
        out += buf.feed(data[pos : pos + step])
        pos, i = pos + step, i + 1
    expected = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    assert out == expected
    assert buf.close() is None


def test_huge_line_in_small_chunks_is_one_line():
    # 8 MiB fed 4 KiB at a time; that this stays linear (8 MiB against 1 MiB, per MiB) is
    # measured by tests/bench (bench_faults), not by a time bound here
    payload = {"text": "x" * (8 * 1024 * 1024)}
    data = framing.encode(payload)
    buf, lines = LineBuffer(), []
    for pos in range(0, len(data), 4096):
        lines += buf.feed(data[pos : pos + 4096])
        assert buf.pending <= len(data)
    assert len(lines) == 1
    assert framing.decode(lines[0]) == payload


def test_encode_is_one_line_even_with_newlines_inside():
    raw = framing.encode({"text": "a\nb\r\nc", "emoji": "🙂"})
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    assert json.loads(raw) == {"text": "a\nb\r\nc", "emoji": "🙂"}


def test_malformed_json_is_reported_not_raised():
    for bad in [b"not json", b'{"a":', b"\xff\xfe", b"[1,2]", b"42", b'"str"']:
        result = framing.decode(bad)
        assert isinstance(result, ParseError), bad
        assert str(result)


@given(st.text(max_size=200))
def test_decode_never_raises(text):
    result = framing.decode(text.encode("utf-8", "surrogatepass"))
    assert isinstance(result, (dict, ParseError))


def test_classify():
    assert framing.classify(framing.request(1, "initialize", {})) == "request"
    assert framing.classify(framing.notification("session/update", {})) == "notification"
    assert framing.classify(framing.result(1, None)) == "response"
    assert framing.classify(framing.error(1, -32601, "nope")) == "response"
    assert framing.classify({"jsonrpc": "2.0", "id": None, "method": "x"}) == "notification"
    assert framing.classify({"jsonrpc": "2.0"}) == "invalid"
    assert framing.classify({"method": 5}) == "invalid"


def test_iter_messages_skips_blank_lines():
    buf = LineBuffer()
    out = list(framing.iter_messages(buf, b'\n  \n{"id":1,"result":2}\nbad\n'))
    assert out[0] == {"id": 1, "result": 2}
    assert isinstance(out[1], ParseError)
    assert len(out) == 2


# ---- the limit on one line -----------------------------------------------------------------------


def test_the_limit_is_64_mib_far_above_what_agents_send():
    assert framing.MAX_LINE_BYTES == 64 * 1024 * 1024
    assert LineBuffer().limit == framing.MAX_LINE_BYTES


def test_a_line_over_the_limit_is_dropped_as_it_arrives_and_reported():
    buf = LineBuffer(limit=1000)
    held = []
    for _ in range(100):  # 100 KB of one line, in pieces: never more than the limit held
        assert buf.feed(b"x" * 1000) == []
        held.append(buf.pending)
    assert max(held) <= 1000
    lines = buf.feed(b'yz\n{"jsonrpc":"2.0","method":"ok"}\n')
    assert len(lines) == 2 and isinstance(lines[0], framing.OversizedLine)
    assert lines[0].size == 100_002 and lines[0] == b"x" * LineBuffer.PREVIEW
    assert lines[1] == b'{"jsonrpc":"2.0","method":"ok"}' and buf.dropped == 1
    # iter_messages: a ParseError that says what happened, then the next message as usual
    buf = LineBuffer(limit=1000)
    found = list(framing.iter_messages(buf, b"a" * 5000 + b'\n{"jsonrpc":"2.0","method":"ok"}\n'))
    assert isinstance(found[0], ParseError) and found[1] == {"jsonrpc": "2.0", "method": "ok"}
    assert str(found[0]).startswith(
        "a line of 5,000 bytes, over the 1,000-byte limit of one ACP message, was dropped: 'aaa"
    )


def test_a_line_at_the_limit_is_kept_and_an_unterminated_long_tail_is_dropped():
    buf = LineBuffer(limit=10)
    assert buf.feed(b"0123456789\n") == [b"0123456789"]
    buf.feed(b"0123456789AB")
    tail = buf.close()
    assert isinstance(tail, framing.OversizedLine) and tail.size == 12
    assert buf.close() is None
