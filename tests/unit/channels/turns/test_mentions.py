"""Who a message names (docs/architecture.md "Who answers"): pills, m.mentions, plain @name, slash
commands. Pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridge.channels.turns.mentions import SlashCommand, named, parse

AGENTS = ("alice", "bob", "carol")
ALIASES = {**{a: a for a in AGENTS}, **{f"sk_{a}": a for a in AGENTS}}


def agent_of(user_id: str) -> str | None:
    if user_id.startswith("@sk_") and user_id.endswith(":localhost"):
        name = user_id[len("@sk_") : -len(":localhost")]
        return name if name in AGENTS else None
    return None


def pill(agent: str, label: str | None = None) -> str:
    return f'<a href="https://matrix.to/#/@sk_{agent}:localhost">{label or agent.title()}</a>'


def mentions(body: str, formatted: str | None = None, ids=()) -> tuple[str, ...]:
    return parse(body, formatted, list(ids), agent_of, ALIASES).mentions


def slash(body: str, formatted: str | None = None) -> SlashCommand | None:
    return parse(body, formatted, [], agent_of, ALIASES).slash


# ---- mentions ---------------------------------------------------------------------------------


def test_element_pill_in_formatted_body():
    assert mentions("Alice: explain goroutines", f"{pill('alice')}: explain goroutines") == ("alice",)


def test_pill_with_percent_encoded_user_id():
    formatted = '<a href="https://matrix.to/#/%40sk_bob%3Alocalhost">Bob</a> hi'
    assert mentions("Bob hi", formatted) == ("bob",)


def test_pill_with_via_query_and_single_quotes():
    formatted = "<a href='https://matrix.to/#/@sk_bob:localhost?via=localhost'>Bob</a> hi"
    assert mentions("Bob hi", formatted) == ("bob",)


def test_m_mentions_user_ids_alone():
    assert mentions("Bob: hi", None, ["@sk_bob:localhost"]) == ("bob",)


def test_m_mentions_of_non_puppets_ignored():
    assert mentions("hi", None, ["@owner:localhost", "@sk_zed:localhost"]) == ()


def test_plain_names_any_case_and_forms():
    assert mentions("@alice hi") == ("alice",)
    assert mentions("@Alice hi") == ("alice",)
    assert mentions("@ALICE, hi") == ("alice",)
    assert mentions("@sk_alice hi") == ("alice",)
    assert mentions("@sk_alice:localhost hi") == ("alice",)
    assert mentions("hi @alice.") == ("alice",)
    assert mentions("@alice: hi") == ("alice",)


def test_order_of_appearance_in_plain_text():
    assert mentions("@bob then @alice") == ("bob", "alice")
    assert mentions("@carol @alice @bob") == ("carol", "alice", "bob")


def test_order_across_pills_and_plain_text():
    formatted = f"@bob first, then {pill('alice')}, then @carol"
    assert mentions("@bob first, then Alice, then @carol", formatted) == ("bob", "alice", "carol")
    formatted = f"{pill('carol')} and @alice"
    assert mentions("Carol and @alice", formatted, ["@sk_carol:localhost"]) == ("carol", "alice")


def test_m_mentions_without_a_position_come_after_the_visible_ones():
    assert mentions("@bob look", None, ["@sk_alice:localhost", "@sk_bob:localhost"]) == ("bob", "alice")


def test_duplicates_once_in_first_position():
    assert mentions("@alice @bob @alice @Alice @sk_alice") == ("alice", "bob")
    formatted = f"{pill('alice')} and @alice and {pill('bob')} and {pill('alice')}"
    assert mentions("x", formatted, ["@sk_alice:localhost", "@sk_bob:localhost"]) == ("alice", "bob")


def test_unknown_names_ignored():
    assert mentions("@dave and @bob") == ("bob",)
    assert mentions("@sk_dave:localhost @alice:localhost") == ()
    formatted = '<a href="https://matrix.to/#/@owner:localhost">owner</a> and @bob'
    assert mentions("owner and @bob", formatted) == ("bob",)


def test_email_like_is_not_a_mention():
    assert mentions("write to a@alice or bob@bob.example") == ()
    assert mentions("see http://x/@alice") == ()


def test_pill_label_is_not_read_as_plain_text():
    # the pill's visible text "@bob" must not count: it is a pill for alice
    assert mentions("@bob hi", '<a href="https://matrix.to/#/@sk_alice:localhost">@bob</a> hi') == ("alice",)


def test_html_entities_in_formatted_body():
    assert mentions("a & @bob", "a &amp; @bob") == ("bob",)


def test_no_mentions():
    assert mentions("just text") == ()
    assert parse("just text", None, [], agent_of, ALIASES).slash is None


# ---- slash commands ---------------------------------------------------------------------------


def test_agent_colon_command():
    assert slash("/alice:review main.py") == SlashCommand("alice", "review", "main.py")
    assert slash("/alice:review main.py").text == "/review main.py"


def test_double_slash_form():
    assert slash("//alice:review main.py") == SlashCommand("alice", "review", "main.py")


def test_command_without_arguments():
    assert slash("/bob:clear") == SlashCommand("bob", "clear", "")
    assert slash("/bob:clear").text == "/clear"


def test_agent_name_case_insensitive_and_multiline_arguments():
    assert slash("/Alice:review a.py\nb.py") == SlashCommand("alice", "review", "a.py\nb.py")
    assert slash("/alice:review\nline two") == SlashCommand("alice", "review", "line two")


def test_mention_then_command():
    assert slash("@alice /review x") == SlashCommand("alice", "review", "x")
    assert slash("@Alice: /review x y") == SlashCommand("alice", "review", "x y")
    assert slash("@sk_alice:localhost //review x") == SlashCommand("alice", "review", "x")
    assert slash("@alice /review x").text == "/review x"


def test_pill_then_command():
    formatted = f"{pill('alice')}: /review args"
    assert slash("Alice: /review args", formatted) == SlashCommand("alice", "review", "args")


def test_unknown_agent_is_not_a_command():
    assert slash("/dave:review x") is None
    assert slash("@dave /review x") is None
    formatted = '<a href="https://matrix.to/#/@owner:localhost">owner</a>: /review x'
    assert slash("owner: /review x", formatted) is None


def test_not_a_command():
    assert slash("@alice please /review later") is None
    assert slash("/review x") is None  # no agent named
    assert slash("look at /alice:review") is None  # not at the start
    assert slash("@alice /tmp/x.log is empty, why?") is None  # a path, not a command


# ---- what the agent reads: `@name`, whatever the client put in the body
# (docs/architecture.md "Who answers") ---

TITLES = {"alice": "Alice", "bob": "Bob", "carol": "Carol", "local": "SmolLM2 · runs on this computer"}


def local_of(user_id: str) -> str | None:
    return "local" if user_id == "@sk_local:localhost" else agent_of(user_id)


def as_read(body: str, formatted: str | None = None, ids=()) -> str:
    return named(body, formatted, list(ids), local_of, TITLES)


def test_elements_pill_label_becomes_the_agents_name():
    label = "SmolLM2 · runs on this computer"
    formatted = f'<a href="https://matrix.to/#/@sk_local:localhost">{label}</a> what is 2 plus 2?'
    assert as_read(f"{label} what is 2 plus 2?", formatted, ["@sk_local:localhost"]) == "@local what is 2 plus 2?"


def test_label_html_escaped_in_the_link_and_a_leading_colon_kept():
    formatted = '<a href="https://matrix.to/#/@sk_bob:localhost">Bob &amp; Co</a>: hi'
    assert as_read("Bob & Co: hi", formatted) == "@bob: hi"


def test_several_pills_each_in_its_place():
    formatted = f"{pill('alice')} and {pill('bob')}, what do you think?"
    assert as_read("Alice and Bob, what do you think?", formatted) == "@alice and @bob, what do you think?"


def test_the_pill_occurrence_is_the_one_where_the_pill_sits():
    """The label also appears as an ordinary word earlier: only the pill's place changes."""
    formatted = f"Ask Bob's friend, not {pill('bob')}"
    assert as_read("Ask Bob's friend, not Bob", formatted) == "Ask Bob's friend, not @bob"


def test_a_label_inside_a_longer_word_is_not_the_pill():
    formatted = f"Alicent, ask {pill('alice')}"
    assert as_read("Alicent, ask Alice", formatted) == "Alicent, ask @alice"


def test_a_client_that_writes_the_at_sign_gets_no_double_one():
    assert as_read("@Alice hi", f"@{pill('alice')} hi") == "@alice hi"


def test_a_pill_to_someone_else_and_text_that_is_not_there_stay():
    formatted = '<a href="https://matrix.to/#/@owner:localhost">Me</a> and <a href="https://matrix.to/#/@sk_bob:localhost">Robert</a>'
    assert as_read("Me and Bob", formatted) == "Me and Bob"


def test_m_mentions_without_a_pill_replace_the_title_at_word_boundaries():
    assert as_read("Carol: hi", None, ["@sk_carol:localhost"]) == "@carol: hi"
    assert as_read("Caroline says hi", None, ["@sk_carol:localhost"]) == "Caroline says hi"
    assert as_read("Carol hi", None, []) == "Carol hi"  # not mentioned: a word like any other


def test_a_puppets_user_id_becomes_the_name_and_plain_names_stay():
    assert as_read("@sk_alice:localhost and @bob, hi") == "@alice and @bob, hi"
    assert as_read("mail me@example.org") == "mail me@example.org"


def test_routing_reads_the_rewritten_text_the_same():
    """The stored text (what context lines and a restart read) routes to the same agents."""
    formatted = f"{pill('alice')} then {pill('bob')}"
    text = as_read("Alice then Bob", formatted)
    assert mentions(text) == mentions("Alice then Bob", formatted) == ("alice", "bob")


@given(
    st.text(max_size=200),
    st.one_of(st.none(), st.text(max_size=200)),
    st.lists(st.one_of(st.text(max_size=30), st.integers(), st.none()), max_size=4),
)
def test_named_never_fails_and_leaves_text_without_mentions_alone(body, formatted, ids):
    out = named(body, formatted, ids, local_of, TITLES)
    assert isinstance(out, str)
    if "@" not in body and not (formatted and "matrix.to" in formatted) and not ids:
        assert out == body
