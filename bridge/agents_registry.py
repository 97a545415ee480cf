"""Agents from the ACP registry: what `sidekicks agents search | add | remove` (docs/commands.md
"The command line") and the bot's `!agents add` share: the registry read (fetched, cached in the
data folder), a `binary` archive fetched and unpacked into the cache folder, the config written
(config/config_edit.py). `sidekicks agents add` then starts the agent once as `check` does.

What is decided (entries, the distribution, the command, the settings) is config/agent_registry.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import platform
import posixpath
import shutil
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import platformdirs

import config as configuration
from config import agent_registry as reg
from config import config_edit
from config.agent_registry import Entry, RegistryError

REGISTRY_BYTES = 8 * 1024 * 1024  # a registry.json larger than this is refused
ARCHIVE_BYTES = 512 * 1024 * 1024  # an agent's archive, downloaded
UNPACKED_BYTES = 1024 * 1024 * 1024  # and unpacked
CACHE_SECONDS = 600.0  # a cached registry younger than this is used without fetching
FETCH_SECONDS = 120.0  # a download's limit (an archive of many MiB on a slow line)


@dataclass
class Added:
    """What `add` did: the agent's name in the config, and what it says about it."""

    name: str
    lines: list[str]


def agents_cache() -> Path:
    """Where `binary` agents are unpacked: `<user cache dir>/sidekicks/agents` (outside the
    config and data folders, which the sandbox hides from agents)."""
    return Path(platformdirs.user_cache_dir("sidekicks", appauthor=False)) / "agents"


def this_platform() -> str | None:
    return reg.platform_key(platform.system(), platform.machine())


async def fetch(url: str, limit: int, into: Path | None = None) -> bytes:
    """GET `url`: its body, or b"" once written into `into`; refused past `limit` bytes; a
    failure is one RegistryError naming the URL."""
    try:
        return await _fetch(url, limit, into)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise RegistryError(f"cannot fetch {url}: {str(exc) or type(exc).__name__}") from None


async def _fetch(url: str, limit: int, into: Path | None) -> bytes:
    too_large = RegistryError(f"{url}: larger than {limit // (1024 * 1024)} MiB")
    timeout = aiohttp.ClientTimeout(total=FETCH_SECONDS)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.get(url) as response:
        if response.status != 200:
            raise RegistryError(f"{url}: HTTP {response.status}")
        if (response.content_length or 0) > limit:
            raise too_large
        body = bytearray()
        size = 0
        with into.open("wb") if into is not None else open(os.devnull, "wb") as handle:
            async for chunk in response.content.iter_chunked(1 << 16):
                size += len(chunk)
                if size > limit:
                    raise too_large
                if into is None:
                    body += chunk
                else:
                    handle.write(chunk)
        return bytes(body)


async def read_registry(source: str | None, data_dir: Path) -> tuple[list[Entry], str]:
    """The registry's entries, and a line saying where they came from and how old they are.
    A URL is cached in the data folder; a fetch that fails falls back to the cache."""
    source = source or reg.REGISTRY_URL
    if not source.startswith(("http://", "https://")):
        try:
            raw = Path(source).read_bytes()[: REGISTRY_BYTES + 1]
        except OSError as exc:
            raise RegistryError(f"{source}: cannot read: {exc.strerror or exc}") from None
        return _entries(raw, source), f"registry: {source}"
    cache = data_dir / "registry" / (hashlib.sha256(source.encode()).hexdigest()[:16] + ".json")
    age = time.time() - cache.stat().st_mtime if cache.exists() else None
    if age is not None and age < CACHE_SECONDS:
        return _entries(cache.read_bytes(), source), f"registry: {source} (cached {reg.age_text(age)})"
    try:
        raw = await fetch(source, REGISTRY_BYTES)
    except RegistryError as exc:
        if age is None:
            raise
        where = f"registry: {source} ({exc}; the copy cached {reg.age_text(age)})"
        return _entries(cache.read_bytes(), source), where
    entries = _entries(raw, source)
    configuration.write_private(cache, raw.decode("utf-8"))
    return entries, f"registry: {source} (fetched just now)"


def _entries(raw: bytes, source: str) -> list[Entry]:
    if len(raw) > REGISTRY_BYTES:
        raise RegistryError(f"{source}: larger than {REGISTRY_BYTES // (1024 * 1024)} MiB")
    try:
        return reg.parse_registry(json.loads(raw))
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, RegistryError):
            raise RegistryError(f"{source}: {exc}") from None
        raise RegistryError(f"{source}: not JSON") from None


async def install_binary(entry: Entry, target: dict[str, Any], cache: Path) -> str:
    """The folder `target`'s archive is unpacked in (`<cache>/<id>-<version>`), fetched and
    unpacked once."""
    folder = cache / f"{entry.id}-{entry.version}"
    if folder.is_dir():
        return str(folder)
    cache.mkdir(parents=True, exist_ok=True)
    url = target["archive"]
    with tempfile.TemporaryDirectory(dir=cache, prefix=".unpacking-") as work:
        archive = Path(work) / "archive"
        await fetch(url, ARCHIVE_BYTES, into=archive)
        unpacked = Path(work) / "unpacked"
        await asyncio.to_thread(unpack, archive, url, unpacked)
        os.replace(unpacked, folder)
    return str(folder)


def unpack(archive: Path, url: str, folder: Path) -> None:
    """Unpack a .zip or a tar (.tar.gz, .tgz, .tar.xz, .tar.bz2): nothing outside `folder`,
    no links out of it, no devices, at most UNPACKED_BYTES."""
    folder.mkdir()
    name = url.lower().split("?")[0]
    if name.endswith(".zip"):
        _unzip(archive, folder)
        return
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            if sum(m.size for m in members) > UNPACKED_BYTES:
                raise RegistryError(f"{url}: unpacks to more than {UNPACKED_BYTES // (1024 * 1024)} MiB")
            tar.extractall(folder, members=members, filter="data")
    except (tarfile.TarError, EOFError) as exc:
        raise RegistryError(f"{url}: not an archive this can unpack ({exc})") from None


def _unzip(archive: Path, folder: Path) -> None:
    try:
        with zipfile.ZipFile(archive) as zipped:
            infos = zipped.infolist()
            if sum(i.file_size for i in infos) > UNPACKED_BYTES:
                raise RegistryError(f"archive unpacks to more than {UNPACKED_BYTES // (1024 * 1024)} MiB")
            for info in infos:
                path = posixpath.normpath(info.filename.replace("\\", "/"))
                if path.startswith(("/", "../")) or path == ".." or ":" in path:
                    raise RegistryError(f"archive entry {info.filename!r} lies outside its folder")
                zipped.extract(info, folder)
                mode = (info.external_attr >> 16) & 0o755
                if mode and not info.is_dir():
                    os.chmod(folder / path, mode | 0o400)
    except zipfile.BadZipFile as exc:
        raise RegistryError(f"not a zip archive ({exc})") from None


async def add_from_registry(
    cfg_path: Path, agent_id: str, cwd: str, source: str | None, data_dir: Path, tools: set[str] | None = None
) -> Added:
    """Write the registry's `agent_id` into the config at `cfg_path`; its name and what to say."""
    entries, where = await read_registry(source, data_dir)
    entry = reg.find(entries, agent_id)
    if tools is None:
        tools = {tool for tool in ("npx", "uvx") if shutil.which(tool)}
    kind, spec = reg.choose(entry, this_platform(), tools)
    if kind == "binary":
        folder = await install_binary(entry, spec, agents_cache())
        command = reg.binary_command(spec, folder)
    else:
        command = reg.package_command(kind, spec, entry.version)
    settings = reg.agent_settings(entry, kind, command, spec.get("env"), cwd)
    name = reg.config_name(entry)
    _state_files(settings)
    await asyncio.to_thread(config_edit.add_agent, cfg_path, name, settings)
    lines = [where, f"added {name}: {entry.name} {entry.version} ({kind}): {' '.join(command)}"]
    write = settings.get("sandbox", {}).get("write")
    lines.append(f"    sandbox writes: {', '.join(write)}" if write else "    sandbox writes: its cwd only")
    return Added(name, lines)


def _state_files(settings: dict[str, Any]) -> None:
    """A `write:` path that names a state file (Claude Code's ~/.claude.json) is made, as `{}`,
    when missing: the sandbox would make a missing `write:` path a folder."""
    for path in settings.get("sandbox", {}).get("write", []):
        full = Path(os.path.expanduser(path))
        if full.suffix == ".json" and not full.exists():
            full.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write("{}\n")


def written_cwd(cwd: str | None) -> str:
    """The `cwd:` written: `~` for the home folder (the default), else the folder made absolute."""
    if cwd is None:
        return "~"
    folder = Path(os.path.expanduser(cwd)).resolve()
    if not folder.is_dir():
        raise RegistryError(f"--cwd: folder does not exist: {folder}")
    return "~" if folder == Path.home().resolve() else str(folder)
