"""The agent sandbox (docs/sandbox.md): a policy turned into a bubblewrap (`bwrap`) command line.

Pure: what exists on disk (`kinds`: path → "dir" or "file") and the bridge's environment come in
as values; acp/process.py looks them up, probes bwrap once and runs the result.

What the command line gives the agent:
- the whole system read-only (`--ro-bind / /`), a fresh `/dev` and `/proc`, a private `/tmp`;
- its own PID namespace (it sees no other process: no one's environ or command line), its own
  session (no terminal to push keys into), no capabilities (root included: nothing can be
  remounted); its own network namespace, always: with `network: on` acp/netns.py gives it the
  internet through slirp4netns once bwrap has written its pid to `--info-fd`, and bwrap waits on
  `--block-fd` until then. `--die-with-parent`: its parent is the supervisor of acp/netns.py,
  which outlives the bridge long enough for the agent to read what the bridge wrote into its
  stdin (a prompt counted as handed over) and end on EOF — killed at once with the bridge, it
  lost prompts the bridge had written (test_kill9: "interrupted before it began");
- writable: `write` (its working directory, its roots, the folder its thread worktrees are made
  in, the config's `write:` paths); read-only even under a hidden folder: `read`;
- hidden: each `hide` folder becomes an empty read-only tmpfs, each `hide` file /dev/null (the bridge's
  config folder and file, its data folder, the registration, other users' homes);
- `reach`: bound in last (the MCP socket, which may lie in the hidden data folder or /tmp);
- `keep`: what must stay readable for the agent to run at all (the Python the MCP command
  runs): bound read-only only where a hidden folder would cover it.

Mounts are applied by depth, shallow first, so the deeper one wins: a working directory inside a
hidden folder stays visible and writable, a hidden folder inside the working directory stays
hidden. At one depth: hidden, then read-only, then writable, then `reach`.

A hidden or read-only path inside a writable folder cannot be renamed, removed or replaced (it
is a mount point: EBUSY), but a folder above it could be, taking it along: `mv ~/.config
~/.config.moved` moves the hidden `~/.config/sidekicks` away and leaves a writable path where the
bridge reads its config. So every writable folder between a writable path and a hidden or
read-only one is pinned: bound onto itself, still writable, now a mount point that cannot be
renamed either (docs/sandbox.md "Nothing writable holds the bridge").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

ENV_KEPT = ("PATH", "HOME", "LANG", "TERM")  # what an agent gets of the bridge's environment
FIX = "install bubblewrap (apt-get install bubblewrap) or set sandbox: off for this agent"

# at one depth, in this order (the later mount covers the earlier one)
HIDE_DIR, HIDE_FILE, READ, WRITE, REACH = "hide-dir", "hide-file", "read", "write", "reach"
PIN = "pin"  # a writable folder bound onto itself: a mount point, so it cannot be renamed
_ORDER = {HIDE_DIR: 0, HIDE_FILE: 0, READ: 1, WRITE: 2, PIN: 2, REACH: 3}


@dataclass(frozen=True)
class Sandbox:
    """What one agent process may reach (paths absolute, links resolved by the caller)."""

    write: tuple[str, ...] = ()
    read: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()
    reach: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()
    network: bool = True
    host_ports: tuple[int, ...] = ()  # the host's 127.0.0.1 ports it reaches (acp/forward.py)

    def reaching(self, *paths: str) -> Sandbox:
        """The same sandbox with `paths` (sockets) reachable too."""
        return replace(self, reach=tuple(dict.fromkeys((*self.reach, *paths))))

    def forwarding(self, *ports: int) -> Sandbox:
        """The same sandbox with these ports of the host's 127.0.0.1 reachable too."""
        return replace(self, host_ports=tuple(dict.fromkeys((*self.host_ports, *ports))))

    def paths(self) -> tuple[str, ...]:
        """Every path whose kind (folder, file, missing) the command line depends on."""
        return tuple(dict.fromkeys((*self.write, *self.read, *self.hide, *self.reach, *self.keep)))


@dataclass(frozen=True)
class Mount:
    kind: str
    path: str


def depth(path: str) -> int:
    return len(PurePosixPath(path).parts)


def under(path: str, folder: str) -> bool:
    """`path` is `folder` or lies below it."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def mounts(sandbox: Sandbox, cwd: str, kinds: Mapping[str, str]) -> list[Mount]:
    """The mounts after the read-only root, in the order they are applied. Paths missing from
    `kinds` (not on disk) are left out; `/` is never made writable; /tmp is private."""
    found: list[Mount] = [Mount(HIDE_DIR, "/tmp")]
    writable = [p for p in dict.fromkeys((cwd, *sandbox.write)) if p != "/" and p in kinds]
    found += [Mount(WRITE, p) for p in writable]
    found += [Mount(READ, p) for p in dict.fromkeys(sandbox.read) if p in kinds and p not in writable]
    hidden = []
    for path in dict.fromkeys(sandbox.hide):
        if path in kinds and path != "/":
            found.append(Mount(HIDE_DIR if kinds[path] == "dir" else HIDE_FILE, path))
            if kinds[path] == "dir":
                hidden.append(path)
    hidden.append("/tmp")
    for path in dict.fromkeys(sandbox.keep):
        if path in kinds and any(under(path, folder) for folder in hidden):
            found.append(Mount(READ, path))
    found += [Mount(REACH, p) for p in dict.fromkeys(sandbox.reach) if p in kinds]
    found.sort(key=lambda m: (depth(m.path), _ORDER[m.kind]))
    # a hidden file already in a hidden folder (nothing shown between them) needs no mount
    found = [m for i, m in enumerate(found) if m.kind != HIDE_FILE or _covering(found[:i], m.path) != HIDE_DIR]
    found += pins(found)
    found.sort(key=lambda m: (depth(m.path), _ORDER[m.kind]))
    return found


def pins(found: list[Mount]) -> list[Mount]:
    """The folders to pin: every folder above a hidden or read-only mount that would otherwise be
    writable (the deepest mount it lies in is writable) and is no mount point yet."""
    points = {m.path for m in found}
    wanted: dict[str, None] = {}
    for mount in found:
        if mount.kind not in (HIDE_DIR, HIDE_FILE, READ) or mount.path == "/tmp":
            continue
        for folder in PurePosixPath(mount.path).parents:
            path = str(folder)
            if path == "/" or path in points:
                continue
            if _covering([m for m in found if depth(m.path) < depth(path)], path) == WRITE:
                wanted[path] = None
    return [Mount(PIN, path) for path in wanted]


def _covering(before: list[Mount], path: str) -> str | None:
    """The kind of the last mount in `before` that `path` lies in."""
    return next((m.kind for m in reversed(before) if under(path, m.path)), None)


def argv(
    sandbox: Sandbox,
    command: Sequence[str],
    cwd: str,
    kinds: Mapping[str, str],
    bwrap: str = "bwrap",
    fds: tuple[int, int] | None = None,
    resolv: tuple[int, str] | None = None,
) -> list[str]:
    """The command line that runs `command` in `cwd` inside the sandbox. `fds`: bwrap's info fd
    (it writes the sandbox's pid there) and block fd (it waits there before running `command`),
    for the network's set-up (acp/netns.py). `resolv`: an fd bwrap reads the sandbox's
    resolv.conf from, and where it goes (`resolver`)."""
    line = [bwrap, "--new-session", "--unshare-pid", "--unshare-net", "--die-with-parent", "--cap-drop", "ALL"]
    if fds is not None:
        line += ["--info-fd", str(fds[0]), "--block-fd", str(fds[1])]
    line += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for mount in mounts(sandbox, cwd, kinds):
        if mount.kind == HIDE_DIR and mount.path == "/tmp":
            line += ["--tmpfs", "/tmp"]  # private, and the agent's to write
        elif mount.kind == HIDE_DIR:
            line += ["--perms", "0555", "--tmpfs", mount.path]  # empty, and nothing written there
        elif mount.kind == HIDE_FILE:
            line += ["--ro-bind", "/dev/null", mount.path]
        elif mount.kind == READ:
            line += ["--ro-bind", mount.path, mount.path]
        else:  # WRITE, PIN, REACH
            line += ["--bind", mount.path, mount.path]
    if resolv is not None:  # (fd, the real path of /etc/resolv.conf): its text for the sandbox
        line += ["--ro-bind-data", str(resolv[0]), resolv[1]]
    return [*line, "--chdir", cwd, "--", *command]


def environment(agent_env: Mapping[str, str], bridge_env: Mapping[str, str]) -> dict[str, str]:
    """The agent's whole environment: its `env:` over PATH, HOME, LANG, TERM of the bridge's."""
    kept = {name: bridge_env[name] for name in ENV_KEPT if name in bridge_env}
    return {**kept, **{str(k): str(v) for k, v in agent_env.items()}}


def probe_argv(network: bool, bwrap: str = "bwrap", fds: tuple[int, int] | None = None) -> list[str]:
    """A sandbox as agents get it, running `true`: does bwrap work here?"""
    return argv(Sandbox(network=network), ["true"], "/", {"/tmp": "dir"}, bwrap, fds)


SLIRP_DNS = "10.0.2.3"  # slirp4netns's own resolver, asking the host's


def resolver(resolv_conf: str) -> str | None:
    """What /etc/resolv.conf must say inside a sandbox with the network on, or None when the
    host's will do. A nameserver on the host's loopback (systemd-resolved's 127.0.0.53, a local
    dnsmasq) is not reachable from the sandbox's own loopback: then slirp4netns's resolver, which
    asks the host's, takes its place (search and options lines kept)."""
    servers, kept = [], []
    for line in resolv_conf.splitlines():
        words = line.split()
        if words and words[0] == "nameserver" and len(words) > 1:
            servers.append(words[1])
        elif words and words[0] in ("search", "domain", "options"):
            kept.append(" ".join(words))
    if any(not s.startswith("127.") and s not in ("::1", "0.0.0.0") for s in servers):
        return None
    return "\n".join((f"nameserver {SLIRP_DNS}", *kept)) + "\n"


def run_folders(resolv_conf: str, folders: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What to empty of the host's sockets and what to bind back, given where /etc/resolv.conf
    leads (`resolv_conf`, links resolved) and the real folders of /run and /var/run: (those
    folders, the folder of resolv.conf when it lies in one of them — systemd-resolved's
    /run/systemd/resolve —). Nothing else of /run: not nscd's socket (glibc then reads
    /etc/hosts and asks DNS itself), no D-Bus, systemd, PostgreSQL or user socket."""
    hidden = tuple(dict.fromkeys(f for f in folders if f != "/"))
    inside = any(under(resolv_conf, folder) for folder in hidden)
    kept = (str(PurePosixPath(resolv_conf).parent),) if inside else ()
    return hidden, kept
