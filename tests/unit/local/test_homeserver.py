"""The embedded homeserver (bridge/local/homeserver.py) against a real Synapse."""

from __future__ import annotations

import asyncio
import os
import socket
import stat

import aiohttp
import nio
import pytest
import yaml
from matrix_helpers import events_in, login, sync_until, texts_in

import config.registration
from bridge.local.homeserver import Homeserver, HomeserverError, free_port


async def _get(url: str, token: str | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http:
        async with http.get(url, headers=headers) as response:
            return response.status, await response.json(content_type=None)


async def _post(url: str, body: dict, token: str | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=body, headers=headers) as response:
            return response.status, await response.json(content_type=None)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_fixture_serves_the_client_api(homeserver):
    status, body = await _get(homeserver.url + "/_matrix/client/versions")
    assert status == 200
    assert "v1.1" in body["versions"]
    assert homeserver.url == f"http://127.0.0.1:{homeserver.server.port}"
    assert homeserver.owner_id == "@owner:localhost"
    assert homeserver.stranger_id == "@stranger:localhost"


async def test_owner_creates_an_unencrypted_room_and_talks(homeserver):
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    try:
        created = await owner.room_create(name="homeserver test")
        assert isinstance(created, nio.RoomCreateResponse), created
        room = created.room_id
        sent = await owner.room_send(room, "m.room.message", {"msgtype": "m.text", "body": "hello"})
        assert isinstance(sent, nio.RoomSendResponse), sent
        await sync_until(owner, lambda: "hello" in texts_in(owner, room))
        events = events_in(owner, room)
        message = next(e for e in events if e["type"] == "m.room.message")
        assert message["event_id"] == sent.event_id
        assert message["sender"] == homeserver.owner_id
        assert message["content"] == {"msgtype": "m.text", "body": "hello"}
        # New rooms are unencrypted (encryption_enabled_by_default_for_room_type: off).
        assert "m.room.create" in [e["type"] for e in events]
        assert "m.room.encryption" not in [e["type"] for e in events]
        assert not owner.rooms[room].encrypted
    finally:
        await owner.close()


async def test_rooms_are_of_a_version_every_named_client_reads(homeserver):
    """nheko 0.11 (Debian's) cannot parse version-12 room ids (no `:server`) nor a version-11
    m.room.create (no `creator`): a room a client makes on the embedded homeserver is version 10,
    as its m.room.create says — what a client reads."""
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    try:
        created = await owner.room_create(name="which version")
        assert isinstance(created, nio.RoomCreateResponse), created
        assert created.room_id.startswith("!") and created.room_id.endswith(":localhost")
        state = await owner.room_get_state_event(created.room_id, "m.room.create")
        assert isinstance(state, nio.RoomGetStateEventResponse), state
        assert state.content["room_version"] == "10"
        assert state.content["creator"] == homeserver.owner_id
    finally:
        await owner.close()


async def test_sync_until_names_the_condition_on_timeout(homeserver):
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    try:

        def never() -> bool:
            return False

        with pytest.raises(AssertionError, match="never still false after 0.5 s"):
            await sync_until(owner, never, timeout=0.5)
    finally:
        await owner.close()


async def test_passwords_are_checked(homeserver):
    with pytest.raises(AssertionError, match="login of @stranger:localhost refused"):
        await login(homeserver, homeserver.stranger_id, homeserver.owner_password)
    stranger = await login(homeserver, homeserver.stranger_id, homeserver.stranger_password)
    await stranger.close()


async def test_rate_limits_are_relaxed(homeserver):
    # Synapse's default allows 3 failed logins per account before answering 429.
    for _ in range(8):
        status, body = await _post(
            homeserver.url + "/_matrix/client/v3/login",
            {"type": "m.login.password", "password": "wrong", "identifier": {"type": "m.id.user", "user": "stranger"}},
        )
        assert (status, body["errcode"]) == (403, "M_FORBIDDEN")


async def test_open_registration_is_refused(homeserver):
    status, body = await _post(
        homeserver.url + "/_matrix/client/v3/register",
        {"username": "intruder", "password": "long enough password", "auth": {"type": "m.login.dummy"}},
    )
    assert status == 403
    assert body["errcode"] == "M_FORBIDDEN"


async def test_register_user_twice_returns_the_same_user(homeserver):
    again = await homeserver.server.register_user("owner", "another password")
    assert again == homeserver.owner_id
    # The existing account is left as it was.
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    await owner.close()
    extra = await homeserver.server.register_user("extra_admin", "pw-extra", admin=True)
    assert extra == "@extra_admin:localhost"


async def test_appservice_registration_is_loaded(homeserver):
    registration = config.registration.read(homeserver.registration_path)
    whoami = homeserver.url + "/_matrix/client/v3/account/whoami"
    status, body = await _get(whoami, registration.as_token)
    assert (status, body["user_id"]) == (200, "@sidekicks:localhost")
    status, body = await _get(whoami, "not-the-token")
    assert (status, body["errcode"]) == (401, "M_UNKNOWN_TOKEN")
    # Puppets in the exclusive namespace can be created by the appservice alone.
    status, body = await _post(
        homeserver.url + "/_matrix/client/v3/register",
        {"type": "m.login.application_service", "username": "sk_probe", "inhibit_login": True},
        registration.as_token,
    )
    assert (status, body["user_id"]) == (200, "@sk_probe:localhost")
    status, body = await _get(whoami + "?user_id=@sk_probe:localhost", registration.as_token)
    assert (status, body["user_id"]) == (200, "@sk_probe:localhost")


async def test_well_known_tells_element_not_to_encrypt(homeserver):
    status, body = await _get(homeserver.url + "/.well-known/matrix/client")
    assert status == 200
    assert body["io.element.e2ee"] == {"default": False}
    assert body["m.homeserver"]["base_url"] == homeserver.url + "/"


def test_config_is_private_and_local(homeserver):
    server = homeserver.server
    assert _mode(server.config_path) == 0o600
    assert _mode(server.signing_key_path) == 0o600
    assert _mode(server.folder) == 0o700
    data = yaml.safe_load(server.config_path.read_text())
    [listener] = data["listeners"]
    assert listener["bind_addresses"] == ["127.0.0.1"]
    assert [r["names"] for r in listener["resources"]] == [["client"]]
    assert data["enable_registration"] is False
    assert data["report_stats"] is False
    assert data["trusted_key_servers"] == []
    assert data["database"]["name"] == "sqlite3"
    assert data["app_service_config_files"] == [str(homeserver.registration_path)]
    # Synapse logs to its file, not to our output.
    assert server.log_path.exists()
    assert "Synapse now listening" in server.log_path.read_text()


def test_ensure_config_keeps_secrets_and_key(tmp_path):
    first = Homeserver(tmp_path / "hs", port=free_port())
    first.ensure_config()
    before = yaml.safe_load(first.config_path.read_text())
    key = first.signing_key_path.read_text()
    assert key.startswith("ed25519 a_")

    registration = tmp_path / "reg.yaml"
    registration.write_text("id: x\n")
    port = free_port()
    second = Homeserver(tmp_path / "hs", port=port, appservice_files=[registration], relaxed_limits=True)
    second.ensure_config()
    second.ensure_config()
    after = yaml.safe_load(second.config_path.read_text())
    for secret in ("registration_shared_secret", "macaroon_secret_key", "form_secret"):
        assert len(before[secret]) >= 32
        assert after[secret] == before[secret]
    assert second.signing_key_path.read_text() == key
    assert after["listeners"][0]["port"] == port
    assert after["public_baseurl"] == f"http://127.0.0.1:{port}/"
    assert after["app_service_config_files"] == [str(registration)]
    assert after["rc_login"]["failed_attempts"]["burst_count"] >= 10000
    assert after["bcrypt_rounds"] == 4
    # media through the legacy endpoints too: nheko 0.11 fetches avatars and files only there
    assert after["enable_authenticated_media"] is False
    assert "rc_login" not in before
    assert _mode(second.config_path) == 0o600

    # Another folder gets other secrets.
    other = Homeserver(tmp_path / "other", port=free_port())
    other.ensure_config()
    other_data = yaml.safe_load(other.config_path.read_text())
    assert other_data["registration_shared_secret"] != before["registration_shared_secret"]

    renamed = Homeserver(tmp_path / "hs", server_name="example.org", port=port)
    with pytest.raises(HomeserverError, match="holds a homeserver for 'localhost'"):
        renamed.ensure_config()


async def test_stop_leaves_no_process(tmp_path):
    server = Homeserver(tmp_path / "hs", port=free_port())
    progress: list[str] = []
    await server.start(progress=progress.append)
    try:
        pid = int(server.pid_path.read_text())
        assert not _gone(pid)
        assert os.getpgid(pid) == pid  # its own process group
        assert progress[0].startswith("Starting the homeserver")
        assert progress[-1].startswith(f"Homeserver ready at {server.url}")
        assert not server.running_elsewhere()  # our own child is not "elsewhere"

        # A second `sidekicks up` on the same folder sees it and does not start another.
        twin = Homeserver(tmp_path / "hs", port=server.port)
        assert twin.running_elsewhere()
        with pytest.raises(HomeserverError, match=f"another homeserver \\(pid {pid}\\)"):
            await twin.start()
    finally:
        await server.stop()
    assert _gone(pid)
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    assert not server.pid_path.exists()
    assert not twin.running_elsewhere()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
    await server.stop()  # idempotent


async def test_restart_keeps_accounts(tmp_path):
    server = Homeserver(tmp_path / "hs", port=free_port())
    await server.start()
    try:
        await server.register_user("keeper", "pw-keeper")
    finally:
        await server.stop()
    await server.start()
    try:
        status, body = await _post(
            server.url + "/_matrix/client/v3/login",
            {
                "type": "m.login.password",
                "password": "pw-keeper",
                "identifier": {"type": "m.id.user", "user": "keeper"},
            },
        )
        assert (status, body["user_id"]) == (200, "@keeper:localhost")
    finally:
        await server.stop()


async def test_port_in_use_is_a_clear_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = Homeserver(tmp_path / "hs", port=port)
        with pytest.raises(HomeserverError) as caught:
            await server.start()
    message = str(caught.value)
    assert f"port {port} on 127.0.0.1 is already in use" in message
    assert "\n" not in message
    assert not server.pid_path.exists()


async def test_synapse_failing_at_start_is_a_clear_error(tmp_path):
    broken = tmp_path / "registration.yaml"
    broken.write_text("id: broken\nurl: http://127.0.0.1:9\n")  # no tokens
    server = Homeserver(tmp_path / "hs", port=free_port(), appservice_files=[broken])
    with pytest.raises(HomeserverError) as caught:
        await server.start(timeout=30)
    message = str(caught.value)
    assert message.startswith("the homeserver stopped while starting (exit code 1): ")
    assert "as_token" in message and str(broken) in message
    assert str(server.log_path) in message
    assert "Traceback" not in message and "\n" not in message
    assert not server.pid_path.exists()
    await server.stop()  # nothing to stop, no error


async def test_missing_registration_file_is_refused_before_starting(tmp_path):
    server = Homeserver(tmp_path / "hs", port=free_port(), appservice_files=[tmp_path / "missing.yaml"])
    with pytest.raises(HomeserverError, match="appservice registration file not found: .*missing.yaml"):
        await server.start()
    assert not server.pid_path.exists()


async def test_cancelled_start_leaves_no_process(tmp_path):
    server = Homeserver(tmp_path / "hs", port=free_port())
    task = asyncio.create_task(server.start())
    while not server.pid_path.exists():
        await asyncio.sleep(0.01)
    pid = int(server.pid_path.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _gone(pid)
    assert not server.pid_path.exists()
