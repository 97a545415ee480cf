"""acp/agents/atomic_file.py: a file is replaced whole or not at all, and no temporary is left."""

from __future__ import annotations

import stat

import pytest

from acp.agents.atomic_file import replacing


def test_the_file_is_replaced_once_written_and_is_private(tmp_path):
    path = tmp_path / "s.json"
    path.write_text("old")
    with replacing(path) as f:
        f.write("new ✓")
        assert path.read_text() == "old"  # not before the block ends
    assert path.read_text(encoding="utf-8") == "new ✓"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with replacing(tmp_path / "s.kv", binary=True) as f:
        f.write(b"\x00\x01")
    assert (tmp_path / "s.kv").read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json", "s.kv"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "s.kv"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), replacing(path, binary=True) as f:
        f.write(b"half")
        raise RuntimeError("disk full")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["s.kv"]
