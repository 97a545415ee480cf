"""store/keys.py: the key-value keys are part of the schema — a store written by an earlier
version is read with the same names, so none changes without a migration step."""

from store import keys


def test_the_keys_are_the_ones_earlier_versions_wrote():
    assert keys.SPACE == "space"
    assert keys.TRANSACTION_ORDER == "appservice/transaction-order"
    assert keys.OUTAGE_PROBE == "outage:probe"
    assert keys.E2EE_PENDING == "e2ee:pending" and keys.E2EE_ROOMS == "e2ee:rooms"
    assert keys.bot_dm("@me:hs") == "bot_dm:@me:hs" and keys.bot_room("!r:hs") == "bot_room:!r:hs"
    assert keys.command_digest("!r:hs", "alice") == "msc4391:!r:hs:alice"
    assert keys.handled_event("$e") == "ev:$e"


def test_no_module_of_the_bridge_spells_a_key_itself():
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    spelled = [
        '"bot_dm:',
        '"bot_room:',
        'f"bot_dm:',
        'f"bot_room:',
        '"e2ee:pending"',
        '"e2ee:rooms"',
        '"outage:probe"',
        '"appservice/transaction-order"',
        '"msc4391:',
        '"ev:',
    ]
    found = [
        f"{path.relative_to(root)}: {word}"
        for path in sorted((root / "bridge").rglob("*.py"))
        for word in spelled
        if word in path.read_text(encoding="utf-8")
    ]
    assert found == []


def test_the_keys_only_a_migration_step_reads_are_not_used_by_the_bridge():
    """e2ee:pending and e2ee:rooms moved to tables of their own (migration step 8, store/e2ee.py)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    found = [
        str(path.relative_to(root))
        for path in sorted((root / "bridge").rglob("*.py"))
        if "E2EE_PENDING" in path.read_text(encoding="utf-8") or "E2EE_ROOMS" in path.read_text(encoding="utf-8")
    ]
    assert found == []
