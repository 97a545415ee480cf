"""Several people on one machine (docs/architecture.md "Beyond one machine"): two configs, two
bridges, one real Synapse.

Ana and Ben each have their own config, registration, bridge, store (the hash-of-path data
folder) and an agent called `alice`: Ana's is @sk_alice, Ben's @sk-ben_alice. Each owner reaches
only their own puppets, and neither bridge sees or keeps the other person's messages.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

import nio
import pytest
import yaml
from bridge_harness import Deliveries, RunningBridge, agent, answers_in
from helpers import open_dm, prompts, say
from matrix_helpers import TestHomeserver, caught_up, events_in, login, sync_until

import config as configuration
from bridge.local.homeserver import Homeserver, free_port
from config import registration as registrations

DOMAIN = "localhost"


def write_person(
    folder: Path, name: str, prefix: str, bot: str, as_id: str, hs_port: int, hs_yaml: Path, agents: dict
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "owner": f"@{name}:{DOMAIN}",
                "homeserver": {"url": f"http://127.0.0.1:{hs_port}", "domain": DOMAIN, "config": str(hs_yaml)},
                "appservice": {
                    "listen": f"127.0.0.1:{free_port()}",
                    "puppet_prefix": prefix,
                    "bot": bot,
                    "id": as_id,
                    "registration": "registration.yaml",
                },
                # in their sandbox, the agents write their logs in the test's folder (as bridge_harness)
                "agents": {
                    name: {"sandbox": {"write": [str(folder.parent)]}, **entry} for name, entry in agents.items()
                },
            },
            sort_keys=False,
        )
    )
    return path


def stored_text(data_dir: Path) -> str:
    """Every value of every row of the SQLite store in `data_dir`, as one text."""
    [db_file] = [p for p in data_dir.iterdir() if p.suffix in (".db", ".sqlite", ".sqlite3")]
    with sqlite3.connect(f"file:{db_file}?mode=ro", uri=True) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return "\n".join(
            str(value) for table in tables for row in db.execute(f'SELECT * FROM "{table}"') for value in row
        )


async def start(path: Path) -> RunningBridge:
    from bridge.bridge import Bridge
    from bridge.cli import open_store

    cfg = configuration.load(path)
    registration = registrations.read(cfg.registration_path)
    store, unavailable = open_store(cfg)
    assert not unavailable
    bridge = Bridge(cfg, registration, store, history_unavailable=False)
    deliveries = Deliveries()  # running.handled(event_id): see bridge_harness
    deliveries.install(bridge.server.app)
    await bridge.start()
    return RunningBridge(bridge, cfg, deliveries)


async def wait_member(client: nio.AsyncClient, room_id: str, user_id: str, membership: str) -> None:
    await sync_until(
        client,
        lambda: any(
            e.get("type") == "m.room.member"
            and e.get("state_key") == user_id
            and e["content"].get("membership") == membership
            for e in events_in(client, room_id)
        ),
    )


async def answer_with(client, room_id, puppet_id, text, timeout=60) -> None:
    await sync_until(
        client,
        lambda: any(text in a["body"] for a in answers_in(events_in(client, room_id), puppet_id)),
        timeout=timeout,
    )


@pytest.fixture
async def two_people(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # data folders by hash of path
    hs_port = free_port()
    synapse = tmp_path / "synapse"
    hs_yaml = synapse / "homeserver.yaml"
    logs = {"ana": tmp_path / "ana-alice.log", "ben": tmp_path / "ben-alice.log"}
    ana_path = write_person(
        tmp_path / "ana",
        "ana",
        "sk_",
        "sidekicks",
        "sidekicks",
        hs_port,
        hs_yaml,
        {"alice": agent("--log", str(logs["ana"]), title="Ana's Alice")},
    )
    ben_path = write_person(
        tmp_path / "ben",
        "ben",
        "sk-ben_",
        "sidekicks_ben",
        "sidekicks_ben",
        hs_port,
        hs_yaml,
        {"alice": agent("--log", str(logs["ben"]), title="Ben's Alice")},
    )
    ana_cfg, ben_cfg = configuration.load(ana_path), configuration.load(ben_path)
    registrations.ensure(ana_cfg)
    registrations.ensure(ben_cfg, others=[ana_cfg.registration_path])
    server = Homeserver(
        synapse,
        server_name=DOMAIN,
        port=hs_port,
        relaxed_limits=True,
        appservice_files=[ana_cfg.registration_path, ben_cfg.registration_path],
    )
    await server.start()
    bridges = []
    try:
        passwords = {name: f"pw-{name}-0123456789" for name in ("ana", "ben")}
        for name, password in passwords.items():
            await server.register_user(name, password)
        hs = TestHomeserver(
            url=server.url,
            domain=DOMAIN,
            as_port=0,
            registration_path=ana_cfg.registration_path,
            owner_id="@ana:localhost",
            owner_password=passwords["ana"],
            stranger_id="@ben:localhost",
            stranger_password=passwords["ben"],
            folder=tmp_path,
            server=server,
        )
        bridges.append(await start(ana_path))
        bridges.append(await start(ben_path))
        yield hs, bridges, logs, tmp_path, hs_yaml
    finally:
        for bridge in reversed(bridges):
            await bridge.stop()
        await server.stop()


async def test_two_people_two_bridges_one_homeserver(two_people):
    hs, (ana_bridge, ben_bridge), logs, tmp_path, hs_yaml = two_people
    ana_alice, ben_alice = "@sk_alice:localhost", "@sk-ben_alice:localhost"
    assert ana_bridge.config.data_dir != ben_bridge.config.data_dir
    assert ana_bridge.config.data_dir.name == configuration.config_hash(tmp_path / "ana" / "config.yaml")
    ana = await login(hs, "@ana:localhost", hs.owner_password)
    ben = await login(hs, "@ben:localhost", hs.stranger_password)
    try:
        # 1. Both owners talk to their own agents at the same time.
        ana_dm, ben_dm = await asyncio.gather(open_dm(ana, ana_alice), open_dm(ben, ben_alice))
        await asyncio.gather(say(ana, ana_dm, "hello from ana"), say(ben, ben_dm, "hello from ben"))
        await asyncio.gather(
            answer_with(ana, ana_dm, ana_alice, "hello from ana"), answer_with(ben, ben_dm, ben_alice, "hello from ben")
        )

        # 2. A room both are in, with both agents: each mention reaches only its owner's agent.
        shared = (await ana.room_create(name="shared", invite=[ben.user_id, ana_alice])).room_id
        await wait_member(ana, shared, ana_alice, "join")
        assert isinstance(await ben.join(shared), nio.JoinResponse)
        assert isinstance(await ben.room_invite(shared, ben_alice), nio.RoomInviteResponse)
        await wait_member(ben, shared, ben_alice, "join")
        from_ana = await say(ana, shared, "@alice shared question from ana")
        await answer_with(ana, shared, ana_alice, "shared question from ana")
        from_ben = await say(ben, shared, "@alice shared question from ben")
        await answer_with(ben, shared, ben_alice, "shared question from ben")
        # each bridge has handled the other person's question (both see every event of the
        # room) and finished every turn it began: a wrong answer would be out by now
        await ben_bridge.handled(from_ana)
        await ana_bridge.handled(from_ben)
        await ana_bridge.idle()
        await ben_bridge.idle()
        await caught_up(ana, shared)
        ana_answers = [a["body"] for a in answers_in(events_in(ana, shared), ana_alice)]
        ben_answers = [a["body"] for a in answers_in(events_in(ana, shared), ben_alice)]
        assert len(ana_answers) == 1 and "from ana" in ana_answers[0] and "from ben" not in ana_answers[0]
        assert len(ben_answers) == 1 and "from ben" in ben_answers[0] and "from ana" not in ben_answers[0]

        # 3. Ben invites Ana's puppet: it declines.
        other = (await ben.room_create(name="ben's room", invite=[ana_alice])).room_id
        await wait_member(ben, other, ana_alice, "leave")
        assert not any(
            e.get("state_key") == ana_alice and e["content"].get("membership") == "join" for e in events_in(ben, other)
        )

        # Each agent was only ever prompted by its owner, never shown the other's words.
        ana_prompts, ben_prompts = prompts(logs["ana"]), prompts(logs["ben"])
        assert any("hello from ana" in p for p in ana_prompts) and any("from ana" in p for p in ana_prompts[1:])
        assert any("hello from ben" in p for p in ben_prompts) and any("from ben" in p for p in ben_prompts[1:])
        assert not any("ben" in p for p in ana_prompts), ana_prompts
        assert not any("ana" in p for p in ben_prompts), ben_prompts
    finally:
        await ana.close()
        await ben.close()

    # 4. Each database holds only its owner's history.
    ana_text = stored_text(ana_bridge.config.data_dir)
    ben_text = stored_text(ben_bridge.config.data_dir)
    assert "hello from ana" in ana_text and "shared question from ana" in ana_text
    assert "hello from ben" in ben_text and "shared question from ben" in ben_text
    assert "from ben" not in ana_text and "@ben:localhost" not in ana_text and ben_dm not in ana_text
    assert "from ana" not in ben_text and "@ana:localhost" not in ben_text and ana_dm not in ben_text

    # 5. A third bridge whose prefix lies inside Ana's namespace is refused, in one clear line.
    cy_path = write_person(
        tmp_path / "cy", "cy", "sk_cy_", "sidekicks_cy", "sidekicks_cy", hs.server.port, hs_yaml, {"alice": agent()}
    )
    result = subprocess.run(
        [sys.executable, "-m", "bridge", "registration", "-c", str(cy_path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"{cy_path}: appservice.puppet_prefix: 'sk_cy_' claims users that "), line
    assert str(tmp_path / "ana" / "registration.yaml") in line and "'sk-cy_'" in line
    assert not (tmp_path / "cy" / "registration.yaml").exists()


async def test_up_for_a_second_person_says_how_to_join_a_running_homeserver(two_people):
    """`sidekicks up` finds a homeserver it did not start that does not know it: it says what to do."""
    from bridge.cli import UserError
    from bridge.local.up import up

    hs, _bridges, _logs, tmp_path, hs_yaml = two_people
    folder = tmp_path / "dan"
    folder.mkdir()
    path = folder / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "owner": "@dan:localhost",
                "homeserver": {"embedded": True, "port": hs.server.port, "domain": DOMAIN, "config": str(hs_yaml)},
                "appservice": {
                    "listen": f"127.0.0.1:{free_port()}",
                    "puppet_prefix": "sk-dan_",
                    "bot": "sidekicks_dan",
                    "id": "sidekicks_dan",
                },
                "agents": {"alice": agent()},
            }
        )
    )
    said: list[str] = []
    with pytest.raises(UserError) as caught:
        await up(path, None, asyncio.Event(), said.append)
    text = str(caught.value)
    assert f"a homeserver already runs at {hs.url}" in text and "has not loaded this bridge" in text
    assert str(folder / "registration.yaml") in text and str(hs_yaml) in text
    assert "restarts it" in text and "@dan:localhost" in text
    assert (folder / "registration.yaml").exists()
    assert not (tmp_path / "xdg" / "sidekicks" / "data" / configuration.config_hash(path) / "homeserver").exists()
