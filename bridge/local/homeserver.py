"""The embedded homeserver of `sidekicks up` (docs/architecture.md "The command line";
docs/configuration.md "The shipped local agent"): a Synapse of our own, in a folder.

Synapse runs as a child process (`python -m synapse.app.homeserver`), never imported: it brings
its own Twisted reactor and logging, and a crash in it must not take the bridge down with it.

The folder holds everything: homeserver.yaml (0600, it carries the secrets), the signing key,
the SQLite database, the media store and homeserver.log. The configuration is written once;
later calls keep the secrets and the signing key and only bring the port and the appservice
files up to date, so accounts, rooms and access tokens survive restarts.

The server is for one machine: it listens on 127.0.0.1 only, has no federation listener and
refuses federation both ways, and nobody can sign up (accounts come from the shared-secret admin
API, see `register_user`). Its rooms are version 10 (ROOM_VERSION), the newest every client the
README names can read. Element reads `io.element.e2ee` from the well-known file: with the
bridge's encryption on (the default) new rooms are encrypted as on any homeserver; with it off
the well-known file and the server default new rooms to unencrypted.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import io
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from config import write_private

# Every rate limiter Synapse has for clients (synapse/config/ratelimiting.py). Appservice users
# are exempt through `rate_limited: false` in the registration, but the tests also drive human
# accounts hard (many logins, rooms and invites in a few seconds), so they lift all of them.
_RELAXED_LIMIT = {"per_second": 10000, "burst_count": 100000}
_RATE_LIMIT_KEYS = (
    "rc_message",
    "rc_registration",
    "rc_registration_token_validity",
    "rc_login.address",
    "rc_login.account",
    "rc_login.failed_attempts",
    "rc_admin_redaction",
    "rc_joins.local",
    "rc_joins.remote",
    "rc_joins_per_room",
    "rc_key_requests",
    "rc_3pid_validation",
    "rc_invites.per_room",
    "rc_invites.per_user",
    "rc_invites.per_issuer",
    "rc_third_party_invite",
    "rc_media_create",
    "rc_presence.per_user",
    "rc_delayed_event_mgmt",
    "rc_room_creation",
    "rc_reports",
    "rc_user_directory",
    "rc_profile",
)
# The version of the rooms this homeserver makes (see _config: the newest nheko 0.11 reads).
ROOM_VERSION = "10"
_SECRET_KEYS = ("registration_shared_secret", "macaroon_secret_key", "form_secret")
_STOP_GRACE = 15.0  # seconds Synapse gets to finish after SIGTERM before SIGKILL
_TAIL_LINES = 12  # lines of log shown when the server fails to start

# Media (avatars, files) also through the legacy unauthenticated endpoints, as before Synapse
# 1.120: nheko 0.11 (Debian's) fetches only those, and got 404 for every avatar and file
# (docs/using.md "The first minutes"). The cost: a program on this machine that knows a media id
# fetches it without a token; the server listens on 127.0.0.1 only and federates with no one.
# Clients that know the authenticated endpoints (Element) still use them.
AUTHENTICATED_MEDIA_ONLY = False  # Synapse's `enable_authenticated_media`


class HomeserverError(Exception):
    """The embedded homeserver cannot be set up, started or used; the text says why."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_free(port: int) -> bool:
    # SO_REUSEADDR as Twisted sets it: a port that only has connections in TIME_WAIT (a server
    # stopped a moment ago) is free for Synapse, and only a listening socket makes it busy.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _port_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _die_with_parent() -> None:
    # Runs in the child before exec (Linux only): if the bridge dies without stopping Synapse
    # (SIGKILL, crash), the kernel sends Synapse SIGTERM instead of leaving an orphan that
    # holds the port and the database. The kernel ties this to the *thread* that spawned the
    # child, so start() must run on the event loop's thread, not in a worker thread.
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Homeserver:
    """One Synapse serving `server_name` from `folder` on 127.0.0.1:`port`."""

    def __init__(
        self,
        folder: Path,
        server_name: str = "localhost",
        port: int = 8008,
        appservice_files: list[Path] = (),
        relaxed_limits: bool = False,
        encryption: bool = True,
    ):
        self.folder = Path(folder).resolve()
        self.server_name = server_name
        self.port = port
        self.appservice_files = [Path(p).resolve() for p in appservice_files]
        self.relaxed_limits = relaxed_limits
        self.encryption = encryption
        self.config_path = self.folder / "homeserver.yaml"
        self.log_path = self.folder / "homeserver.log"
        self.output_path = self.folder / "homeserver.out"  # Synapse's own stdout/stderr
        self.pid_path = self.folder / "homeserver.pid"
        self.signing_key_path = self.folder / "signing.key"
        self._proc: subprocess.Popen | None = None
        self._shared_secret: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- configuration -------------------------------------------------------------------

    def ensure_config(self) -> None:
        """Write homeserver.yaml, its log config and the signing key; keep existing secrets."""
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)  # database and keys: for this user only
        existing = self._read_config()
        if existing and existing.get("server_name") not in (None, self.server_name):
            # The database is tied to the name it was created with; renaming breaks it.
            raise HomeserverError(
                f"{self.folder} holds a homeserver for {existing['server_name']!r}, not "
                f"{self.server_name!r}; use another folder or the old server name"
            )
        kept = {key: existing[key] for key in _SECRET_KEYS if existing.get(key)}
        for key in _SECRET_KEYS:
            kept.setdefault(key, secrets.token_urlsafe(32))
        self._shared_secret = kept["registration_shared_secret"]

        if not self.signing_key_path.exists():
            # In-process instead of `synapse ... --generate-keys`: saves a second Synapse start.
            from signedjson.key import generate_signing_key, write_signing_keys

            key = generate_signing_key("a_" + secrets.token_hex(2))
            buffer = io.StringIO()
            write_signing_keys(buffer, [key])
            write_private(self.signing_key_path, buffer.getvalue())

        log_config = self.folder / "homeserver.log.yaml"
        _write_if_changed(log_config, yaml.safe_dump(self._log_config(), sort_keys=False))
        text = "# Written by sidekicks; secrets are kept across rewrites.\n" + yaml.safe_dump(
            self._config(kept, log_config), sort_keys=False
        )
        _write_if_changed(self.config_path, text)

    def _read_config(self) -> dict[str, Any]:
        try:
            data = yaml.safe_load(self.config_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, yaml.YAMLError) as exc:
            raise HomeserverError(f"cannot read {self.config_path}: {exc}") from None
        return data if isinstance(data, dict) else {}

    def _config(self, kept: dict[str, str], log_config: Path) -> dict[str, Any]:
        body: dict[str, Any] = {
            "server_name": self.server_name,
            "public_baseurl": self.url + "/",
            "listeners": [
                {
                    "port": self.port,
                    "bind_addresses": ["127.0.0.1"],
                    "type": "http",
                    "tls": False,
                    "x_forwarded": False,
                    # "client" also serves /_synapse/admin and /.well-known; no "federation".
                    "resources": [{"names": ["client"], "compress": False}],
                }
            ],
            "database": {"name": "sqlite3", "args": {"database": str(self.folder / "homeserver.db")}},
            "log_config": str(log_config),
            "media_store_path": str(self.folder / "media_store"),
            "signing_key_path": str(self.signing_key_path),
            **kept,
            "report_stats": False,
            "enable_registration": False,
            "enable_metrics": False,
            # No key servers and an empty allow-list: this server never talks to another one.
            "trusted_key_servers": [],
            "suppress_key_server_warning": True,
            "federation_domain_whitelist": [],
            # puppets are online while the bridge runs, offline after
            # (docs/architecture.md "The Matrix side"; bridge/matrix/presence.py)
            "presence": {"enabled": True},
            # Rooms every client the README names can read
            # (docs/architecture.md "The command line"). Synapse's default, 12, gives rooms ids
            # without `:server`, which nheko 0.11 (Debian's) cannot parse; 11 drops `creator` from
            # m.room.create, which its mtxclient 0.9 requires. 10 has both.
            "default_room_version": ROOM_VERSION,
            "url_preview_enabled": False,
            "enable_authenticated_media": AUTHENTICATED_MEDIA_ONLY,  # nheko 0.11: see its comment
            # Element decides "encrypt new rooms?" from the well-known file; Synapse from this.
            "extra_well_known_client_content": {"io.element.e2ee": {"default": self.encryption}},
            "encryption_enabled_by_default_for_room_type": "off",
            "app_service_config_files": [str(p) for p in self.appservice_files],
            # crypto traffic of the appservice's users in its transactions: how the bot's device
            # (which Synapse serves no /sync) gets its room keys (bridge/e2ee,
            # docs/encryption.md "How it works")
            "experimental_features": {
                "msc2409_to_device_messages_enabled": True,
                "msc3202_transaction_extensions": True,
            },
        }
        if self.relaxed_limits:
            # Tests log in and register dozens of times; cost 4 instead of 12 makes each
            # password check milliseconds instead of a quarter second. Never for real use.
            body["bcrypt_rounds"] = 4
            for dotted in _RATE_LIMIT_KEYS:
                first, _, second = dotted.partition(".")
                if second:
                    body.setdefault(first, {})[second] = dict(_RELAXED_LIMIT)
                else:
                    body[first] = dict(_RELAXED_LIMIT)
        return body

    def _log_config(self) -> dict[str, Any]:
        # To a file, never our stdout: the person's terminal belongs to `sidekicks up`.
        # WARNING and up everywhere, plus Synapse's start/stop lines (synapse.app at INFO).
        return {
            "version": 1,
            "formatters": {"plain": {"format": "%(asctime)s - %(name)s - %(levelname)s - %(message)s"}},
            "handlers": {
                "file": {
                    "class": "logging.handlers.RotatingFileHandler",
                    "formatter": "plain",
                    "filename": str(self.log_path),
                    "maxBytes": 10 * 1024 * 1024,
                    "backupCount": 2,
                    "encoding": "utf8",
                }
            },
            "loggers": {"synapse.app": {"level": "INFO"}},
            "root": {"level": "WARNING", "handlers": ["file"]},
            "disable_existing_loggers": False,
        }

    # -- process -------------------------------------------------------------------------

    def _ready_to_start(self) -> None:
        """Its config written, or a HomeserverError saying why it cannot start: another server
        on this folder, its port taken, a registration file missing."""
        # Before ensure_config: that would overwrite the port the other server is using.
        other = self._pid_elsewhere()
        if other is not None:
            raise HomeserverError(
                f"another homeserver (pid {other}) already serves {self.folder}; "
                f"stop it first or use it at {self._recorded_url()}"
            )
        self.ensure_config()
        if not _port_free(self.port):
            raise HomeserverError(
                f"cannot start the homeserver: port {self.port} on 127.0.0.1 is already in use "
                f"by another program; stop it or choose another homeserver port"
            )
        for path in self.appservice_files:
            if not path.is_file():
                raise HomeserverError(f"appservice registration file not found: {path}")

    async def start(self, progress: Callable[[str], None] | None = None, timeout: float = 60) -> None:
        """Start Synapse and return once it answers the client API."""
        if self._proc is not None and self._proc.poll() is None:
            return
        say = progress or (lambda _text: None)
        self._ready_to_start()
        say(f"Starting the homeserver (Synapse) on {self.url}")
        started = time.monotonic()
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.output_path, "wb") as output:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "synapse.app.homeserver", "-c", str(self.config_path)],
                cwd=self.folder,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                # Own process group: Ctrl-C in the terminal reaches us, not Synapse, and we
                # stop it in order; stop() signals the whole group.
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        # Synapse only writes `pid_file` when it daemonizes, so the pid file is ours.
        self.pid_path.write_text(f"{self._proc.pid}\n", encoding="utf-8")

        ready = False
        try:
            versions = self.url + "/_matrix/client/versions"
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
                while time.monotonic() - started < timeout:
                    code = self._proc.poll()
                    if code is not None:
                        raise HomeserverError(
                            self._failure(f"the homeserver stopped while starting (exit code {code})", log_offset)
                        )
                    try:
                        async with http.get(versions) as response:
                            if response.status == 200:
                                ready = True
                                break
                    except (TimeoutError, aiohttp.ClientError):
                        pass
                    await asyncio.sleep(0.1)
            if not ready:
                raise HomeserverError(self._failure(f"the homeserver did not answer within {timeout:g} s", log_offset))
        finally:
            if not ready:
                # Failed, timed out or cancelled (Ctrl-C): leave nothing running.
                self._kill_now()
        say(f"Homeserver ready at {self.url} ({time.monotonic() - started:.1f} s)")

    async def stop(self) -> None:
        """Stop Synapse (SIGTERM, then SIGKILL after a grace period). Safe to call twice."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            self._signal_group(proc, signal.SIGTERM)
            deadline = time.monotonic() + _STOP_GRACE
            while proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        # SIGKILL the group even after a clean exit: nothing Synapse spawned may outlive it.
        self._signal_group(proc, signal.SIGKILL)
        proc.wait()
        self._forget_process()

    def kill(self) -> None:
        """SIGKILL now, as a crash would: no grace, nothing flushed (the fault tests use it)."""
        self._kill_now()

    def _kill_now(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._signal_group(proc, signal.SIGKILL)
        proc.wait()
        self._forget_process()

    @staticmethod
    def _signal_group(proc: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)  # the group id is the pid (start_new_session)
        except (ProcessLookupError, PermissionError):
            pass

    def _forget_process(self) -> None:
        if self._proc is not None and self._pid_file() == self._proc.pid:
            self.pid_path.unlink(missing_ok=True)
        self._proc = None

    def _failure(self, summary: str, log_offset: int) -> str:
        """One message: what happened and why, else the end of Synapse's output and log."""
        texts = []
        for path, offset in ((self.output_path, 0), (self.log_path, log_offset)):
            try:
                with open(path, "rb") as handle:
                    handle.seek(offset)
                    texts.append((path, handle.read().decode("utf-8", "replace")))
            except OSError:
                pass
        for _path, text in texts:
            reason = _reason(text)
            if reason:
                return f"{summary}: {reason} (details in {self.log_path})"
        parts = [f"{summary} (details in {self.log_path})"]
        for path, text in texts:
            lines = [line.rstrip()[:300] for line in text.splitlines() if line.strip()]
            if lines:
                parts.append(f"last lines of {path.name}:")
                parts.extend("  " + line for line in lines[-_TAIL_LINES:])
        return "\n".join(parts)

    # -- another `sidekicks up` on the same folder ----------------------------------------

    def running_elsewhere(self) -> bool:
        """True when another process (not this object's child) serves this folder."""
        return self._pid_elsewhere() is not None

    def _pid_elsewhere(self) -> int | None:
        pid = self._pid_file()
        if pid is None or (self._proc is not None and self._proc.pid == pid):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, someone else's
        try:
            # Pid numbers are reused: it must be a Synapse started on this very config file.
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if os.fsencode(str(self.config_path)) not in cmdline:
                return None
        except OSError:
            pass  # no /proc (macOS): rely on the port
        return pid if _port_answers(self._recorded_port()) else None

    def _pid_file(self) -> int | None:
        try:
            return int(self.pid_path.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return None

    def _recorded_port(self) -> int:
        # The port the running server was started with, which may differ from ours.
        try:
            return int(self._read_config()["listeners"][0]["port"])
        except (HomeserverError, KeyError, IndexError, TypeError, ValueError):
            return self.port

    def _recorded_url(self) -> str:
        return f"http://127.0.0.1:{self._recorded_port()}"

    # -- accounts ------------------------------------------------------------------------

    async def register_user(self, localpart: str, password: str, admin: bool = False) -> str:
        """Create `@localpart:server_name` with the shared secret; an existing one is fine."""
        secret = self._shared_secret or self._read_config().get("registration_shared_secret")
        if not secret:
            raise HomeserverError(
                f"no registration secret yet in {self.config_path}; call ensure_config() or start() first"
            )
        user_id = f"@{localpart}:{self.server_name}"
        endpoint = self.url + "/_synapse/admin/v1/register"
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
                async with http.get(endpoint) as response:
                    nonce = (await response.json())["nonce"]
                # The MAC proves we hold the secret without sending it (Synapse admin API).
                mac = hmac.new(secret.encode(), digestmod=hashlib.sha1)
                mac.update(
                    b"\0".join(
                        [nonce.encode(), localpart.encode(), password.encode(), b"admin" if admin else b"notadmin"]
                    )
                )
                body = {
                    "nonce": nonce,
                    "username": localpart,
                    "password": password,
                    "admin": admin,
                    "mac": mac.hexdigest(),
                }
                async with http.post(endpoint, json=body) as response:
                    answer = await response.json(content_type=None)
                    status = response.status
        except (TimeoutError, aiohttp.ClientError, ValueError, KeyError) as exc:
            raise HomeserverError(f"cannot register {user_id} at {self.url}: {exc!r}") from None
        if status == 200:
            return answer["user_id"]
        if isinstance(answer, dict) and answer.get("errcode") == "M_USER_IN_USE":
            return user_id
        raise HomeserverError(f"cannot register {user_id}: HTTP {status} {answer}")


def _reason(text: str) -> str | None:
    """The line that says why Synapse gave up: a configuration error or a traceback's last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith("Error in configuration"):
            return " ".join(lines[i : i + 2])
    for line in reversed(lines):
        match = re.match(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$", line)
        if match:
            return f"{match.group(1)}: {match.group(2)}"[:500]
    return None


def _write_if_changed(path: Path, text: str) -> None:
    # Rewriting identical content would only disturb the file's time; always 0600.
    try:
        if path.read_text(encoding="utf-8") == text:
            os.chmod(path, 0o600)
            return
    except FileNotFoundError:
        pass
    write_private(path, text)
