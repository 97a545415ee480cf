"""`sidekicks agents search | add | remove` (docs/commands.md "The command line") run as a real
subprocess against a registry served by a local HTTP server: an `npx` and a `uvx` entry written as
pinned commands (npx and uvx here are stand-ins on PATH that run a tiny ACP agent), a `binary`
archive fetched, unpacked and run, the registry cached with its age, the config's comments kept.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
from aiohttp import web

import config

ROOT = Path(__file__).resolve().parents[3]

# A whole ACP agent on the standard library: what the archive and the npx, uvx stand-ins run.
TINY_AGENT = (ROOT / "tests" / "agents" / "tiny_agent.py").read_text()

CONFIG = """\
# my sidekicks
owner: "@me:localhost"   # me
homeserver:
  url: http://127.0.0.1:1
agents: {}
limits:
  agents_in_memory: 2   # two at a time
"""


def tar_gz(files: dict[str, tuple[str, int]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, (text, mode) in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def zipped(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return out.getvalue()


def registry(base: str) -> dict:
    platform_key = "linux-x86_64" if os.uname().machine == "x86_64" else "linux-aarch64"

    def binary(archive: str) -> dict:
        return {platform_key: {"archive": f"{base}/{archive}", "cmd": "./bin/tiny", "args": ["acp"]}}

    def entry(ident: str, description: str, distribution: dict) -> dict:
        return {
            "id": ident,
            "name": ident.title(),
            "version": "1.2.3",
            "description": description,
            "distribution": distribution,
        }

    return {
        "version": "1.0.0",
        "agents": [
            entry("tiny-npx", "a tiny agent from npm", {"npx": {"package": "@tiny/agent", "args": ["--acp"]}}),
            entry("tiny-uvx", "a tiny agent from PyPI", {"uvx": {"package": "tiny-agent"}}),
            entry("tiny-bin", "a tiny agent, unpacked", {"binary": binary("tiny.tar.gz")}),
            entry("evil-bin", "an archive that escapes", {"binary": binary("evil.tar.gz")}),
            entry("evil-zip", "a zip that escapes", {"binary": binary("evil.zip")}),
        ],
    }


@pytest.fixture
async def served():
    """The registry and its archives over HTTP; the count of registry fetches."""
    fetched = {"registry": 0}
    app = web.Application()
    base: list[str] = []

    async def registry_json(_request):
        fetched["registry"] += 1
        if fetched.get("down"):
            return web.Response(status=503)
        return web.json_response(registry(base[0]))

    archives = {
        "tiny.tar.gz": tar_gz({"bin/tiny": (TINY_AGENT, 0o755)}),
        "evil.tar.gz": tar_gz({"../../escaped": ("x", 0o644)}),
        "evil.zip": zipped({"../escaped": "x"}),
    }

    async def archive(request):
        return web.Response(body=archives[request.match_info["name"]])

    app.router.add_get("/registry.json", registry_json)
    app.router.add_get("/{name}", archive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base.append(f"http://127.0.0.1:{port}")
    yield base[0], fetched
    await runner.cleanup()


@pytest.fixture
def place(tmp_path):
    """A home, caches, a config, and stand-ins for npx and uvx that run the tiny agent."""
    home = tmp_path / "home"
    home.mkdir()
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("npx", "uvx"):
        (tools / tool).write_text(TINY_AGENT)
        (tools / tool).chmod(0o755)
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"),
        "PATH": f"{tools}:{os.environ['PATH']}",
    }
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    return path, env, tmp_path


async def agents(env: dict, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bridge", "agents", *args, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 180)
    for stream in (out, err):
        assert b"Traceback" not in stream, stream.decode()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_search_lists_what_matches_and_caches_the_registry(served, place):
    base, fetched = served
    path, env, _ = place
    code, out, _ = await agents(env, "search", "-c", str(path), "--registry", f"{base}/registry.json", "tiny")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"registry: {base}/registry.json (fetched just now)"
    assert "tiny-npx: Tiny-Npx 1.2.3 (npx)" in lines
    assert "    a tiny agent from npm" in lines
    assert lines[-1] == "3 of 5 agents match 'tiny'"
    code, out, _ = await agents(env, "search", "-c", str(path), "--registry", f"{base}/registry.json", "escapes")
    assert out.splitlines()[0] == f"registry: {base}/registry.json (cached just now)"
    assert out.splitlines()[-1] == "2 of 5 agents match 'escapes'"
    assert fetched["registry"] == 1


async def test_a_registry_that_cannot_be_fetched_is_read_from_the_cache_with_its_age(served, place):
    base, fetched = served
    path, env, tmp_path = place
    source = f"{base}/registry.json"
    assert (await agents(env, "search", "-c", str(path), "--registry", source))[0] == 0
    [cached] = (tmp_path / "xdg-config").rglob("registry/*.json")
    hour_ago = time.time() - 3700
    os.utime(cached, (hour_ago, hour_ago))
    fetched["down"] = 1
    code, out, _ = await agents(env, "search", "-c", str(path), "--registry", source)
    assert code == 0 and fetched["registry"] == 2
    assert out.splitlines()[0] == f"registry: {source} ({source}: HTTP 503; the copy cached 1 hour ago)"
    cached.unlink()
    code, _, err = await agents(env, "search", "-c", str(path), "--registry", source)
    assert code == 1 and err.strip() == f"sidekicks: {source}: HTTP 503"


async def test_the_configs_registry_key_is_read(served, place):
    base, fetched = served
    path, env, _ = place
    path.write_text(CONFIG + f"registry: {base}/registry.json\n")
    code, out, _ = await agents(env, "search", "-c", str(path))
    assert code == 0 and fetched["registry"] == 1, out


async def test_npx_and_uvx_entries_are_written_pinned_and_started_once(served, place):
    base, _ = served
    path, env, _ = place
    source = f"{base}/registry.json"
    code, out, err = await agents(env, "add", "tiny-npx", "-c", str(path), "--registry", source)
    assert code == 0, out + err
    assert "added tiny-npx: Tiny-Npx 1.2.3 (npx): npx -y @tiny/agent@1.2.3 --acp" in out
    assert "✓ tiny-npx: tiny 9.9" in out
    code, out, err = await agents(env, "add", "tiny-uvx", "-c", str(path), "--registry", source)
    assert code == 0, out + err
    assert "✓ tiny-uvx: tiny 9.9" in out
    text = path.read_text()
    assert text.startswith('# my sidekicks\nowner: "@me:localhost"   # me\n'), text
    assert "  agents_in_memory: 2   # two at a time\n" in text
    assert "    command: [npx, -y, '@tiny/agent@1.2.3', --acp]\n" in text
    assert "    command: [uvx, tiny-agent==1.2.3]\n" in text
    assert "    cwd: '~'\n" in text
    loaded = config.load(path)
    assert list(loaded.agents) == ["tiny-npx", "tiny-uvx"]
    assert "      write: [~/.npm]\n" in text  # npx's cache: made in its home as it started
    assert os.path.isdir(os.path.join(env["HOME"], ".npm"))
    code, out, _ = await agents(env, "remove", "tiny-npx", "-c", str(path))
    assert code == 0 and out.strip() == f"removed tiny-npx from {path}"
    assert list(config.load(path).agents) == ["tiny-uvx"]
    assert "tiny-npx" not in path.read_text()


async def test_a_binary_archive_is_fetched_unpacked_and_run(served, place):
    base, _ = served
    path, env, tmp_path = place
    code, out, err = await agents(env, "add", "tiny-bin", "-c", str(path), "--registry", f"{base}/registry.json")
    assert code == 0, out + err
    binary = tmp_path / "xdg-cache" / "sidekicks" / "agents" / "tiny-bin-1.2.3" / "bin" / "tiny"
    assert binary.is_file() and os.access(binary, os.X_OK)
    assert f"(binary): {binary} acp" in out
    assert "✓ tiny-bin: tiny 9.9" in out, out
    assert config.load(path).agents["tiny-bin"].command == (str(binary), "acp")


@pytest.mark.parametrize("ident", ["evil-bin", "evil-zip"])
async def test_an_archive_that_would_write_outside_its_folder_is_refused(served, place, ident):
    base, _ = served
    path, env, tmp_path = place
    code, _, err = await agents(env, "add", ident, "-c", str(path), "--registry", f"{base}/registry.json")
    assert code == 1
    assert err.startswith("sidekicks: ") and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.rglob("escaped"))
    assert path.read_text() == CONFIG


async def test_an_unknown_id_and_an_unknown_name_are_one_line(served, place):
    base, _ = served
    path, env, _ = place
    code, _, err = await agents(env, "add", "tiny", "-c", str(path), "--registry", f"{base}/registry.json")
    assert code == 1 and "no agent 'tiny' in the registry (did you mean tiny-npx, tiny-uvx, tiny-bin?)" in err
    code, _, err = await agents(env, "remove", "bob", "-c", str(path))
    assert code == 2 and err.strip() == f"{path}: no agent named 'bob' (configured: none)"


async def test_a_registry_file_is_read_as_it_is(place):
    path, env, tmp_path = place
    file = tmp_path / "registry.json"
    file.write_text(json.dumps(registry("http://127.0.0.1:1")))
    code, out, _ = await agents(env, "search", "-c", str(path), "--registry", str(file))
    assert code == 0 and out.splitlines()[0] == f"registry: {file}"
