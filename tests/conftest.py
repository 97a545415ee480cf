"""Shared fixtures. `homeserver`: one real Synapse for the whole test session.

Synapse starts in about a second, but creating it for every test would still add up, so it is
shared: tests make their own rooms (and, if they need them, their own users with
`homeserver.server.register_user`). Helpers to drive it from matrix-nio live in
tests/matrix_helpers.py.
"""
from __future__ import annotations

import secrets

import pytest_asyncio
import yaml

import config
import config.registration
from bridge.homeserver import Homeserver, free_port
from matrix_helpers import TestHomeserver


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def homeserver(tmp_path_factory) -> TestHomeserver:
    """A running Synapse on 127.0.0.1 with the bridge's appservice registration loaded.

    Server name "localhost"; users @owner:localhost and @stranger:localhost exist; the
    appservice (bot @sidekicks:localhost, puppets @sk_*:localhost) is expected to listen on
    127.0.0.1:<as_port>, which nothing does until a test starts the bridge there. Rate limits
    are lifted so tests never see 429. See TestHomeserver for the fields.
    """
    folder = tmp_path_factory.mktemp("homeserver")
    hs_port, as_port = free_port(), free_port()
    while as_port == hs_port:
        as_port = free_port()
    base = folder / "base.yaml"
    base.write_text(yaml.safe_dump({
        "owner": "@owner:localhost",
        "homeserver": {"url": f"http://127.0.0.1:{hs_port}", "domain": "localhost"},
        "appservice": {"listen": f"127.0.0.1:{as_port}", "puppet_prefix": "sk_",
                       "bot": "sidekicks", "registration": "registration.yaml"},
    }, sort_keys=False), encoding="utf-8")
    cfg = config.load(base)
    config.registration.ensure(cfg)

    server = Homeserver(folder / "synapse", server_name="localhost", port=hs_port,
                        appservice_files=[cfg.registration_path], relaxed_limits=True)
    await server.start()
    try:
        owner_password = secrets.token_urlsafe(16)
        stranger_password = secrets.token_urlsafe(16)
        owner_id = await server.register_user("owner", owner_password)
        stranger_id = await server.register_user("stranger", stranger_password)
        yield TestHomeserver(
            url=server.url, domain="localhost", as_port=as_port,
            registration_path=cfg.registration_path, owner_id=owner_id,
            owner_password=owner_password, stranger_id=stranger_id,
            stranger_password=stranger_password, folder=folder, server=server)
    finally:
        await server.stop()
