"""Synapse with workers, set up as Synapse's worker documentation ("Scaling synapse via workers")
says, for the `scale` tests (tests/integration/scale) and the worker benchmark (deploy/README.md
"Beyond one machine").

    async with synapse_with_workers(folder, people) as hs:   # a matrix_helpers.TestHomeserver
        ...  hs.url is nginx; hs.server is the main process; hs.workers the rest

The processes, each started as the docs say (`python -m synapse.app.homeserver -c shared.yaml`,
`python -m synapse.app.generic_worker -c shared.yaml -c worker.yaml`):
- PostgreSQL (tests/postgres_cluster.py), the database every process shares;
- Redis (Debian's `redis-server`), the replication stream between the processes;
- `main`: the main process (HTTP replication listener, instance_map);
- `generic_worker1`: client requests, as nginx routes them from the docs' endpoint list;
- `event_persister1`: `stream_writers: {events: event_persister1}`, writes every event;
- `appservice1`: `notify_appservices_from_worker: appservice1`, sends the bridges their
  transactions (the main process sends none: `appservice_transactions` says who sent what);
  its client listener serves the appservice ping (`retries_scheduled` reads its backoff);
- nginx (deploy/workers/nginx_conf.py from deploy/workers/generic_worker.endpoints, the
  appservice ping to `appservice1`), the homeserver's one address.

Every process has a metrics listener: `hs.workers.appservice_transactions()` reads Synapse's own
counter of /transactions requests from each. Any process can be killed (SIGKILL) and started
again (`kill`, `start_process`), Redis restarted, PostgreSQL stopped: the fault tests do.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psycopg2
import yaml
from matrix_helpers import TestHomeserver, worker_port, write_base_config
from postgres_cluster import PG_USER, Cluster

from bridge.local.homeserver import Homeserver, HomeserverError, _die_with_parent

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "workers"
WORKERS = ("generic_worker1", "event_persister1", "appservice1")
SENDER = "appservice1"  # notify_appservices_from_worker
PERSISTER = "event_persister1"  # stream_writers: events


@dataclass
class Person:
    """One more bridge on the homeserver: its owner, puppet prefix and bot (the `owner` of
    @owner:localhost with prefix sk_ is always there, as on the session's Synapse)."""

    name: str
    password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    base_config: Path | None = None  # folder/<name>/base.yaml, with its registration beside it
    as_port: int = 0
    registration_path: Path | None = None

    @property
    def user_id(self) -> str:
        return f"@{self.name}:localhost"

    @property
    def prefix(self) -> str:
        return f"sk-{self.name}_"

    @property
    def bot(self) -> str:
        return f"sidekicks-{self.name}"

    def puppet(self, agent: str) -> str:
        return f"@{self.prefix}{agent}:localhost"


class MainProcess(Homeserver):
    """The main process: the project's Synapse config plus what workers need."""

    def __init__(self, *args: Any, shared: dict[str, Any], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.shared = shared

    def _config(self, kept, log_config):
        body = super()._config(kept, log_config)
        body.update(self.shared)
        replication = [
            {"port": main["port"], "bind_addresses": ["127.0.0.1"], "type": "http"}
            | {"resources": [{"names": ["replication"]}]}
            for main in [self.shared.get("instance_map", {}).get("main")]
            if main
        ]
        body["listeners"] = [
            *body["listeners"],
            *replication,
            {"port": self.metrics_port, "bind_addresses": ["127.0.0.1"], "type": "metrics"},
        ]
        return body

    metrics_port = 0


class Processes:
    """The worker processes, Redis and nginx of one homeserver (the main process is `main`)."""

    def __init__(self, folder: Path, main: MainProcess, redis_port: int, proxy_port: int, ports: dict[str, int]):
        self.folder, self.main, self.redis_port, self.proxy_port = folder, main, redis_port, proxy_port
        self.ports = ports  # name → its HTTP listener (client for the generic worker, else replication)
        self.metrics = {name: worker_port() for name in WORKERS} | {"main": main.metrics_port}
        self.procs: dict[str, subprocess.Popen] = {}
        args = main.shared["database"]["args"]
        self.dsn = {
            "host": args["host"],
            "port": args["port"],
            "user": args["user"],
            "password": args["password"],
            "dbname": args["database"],
        }
        folder.mkdir(parents=True, exist_ok=True)

    # -- Redis ---------------------------------------------------------------------------

    def start_redis(self) -> None:
        folder = self.folder / "redis"
        folder.mkdir(exist_ok=True)
        self._spawn(
            "redis",
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(folder),
                "--logfile",
                str(folder / "redis.log"),
            ],
        )

    async def redis_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.redis_port)
                writer.write(b"PING\r\n")
                answer = await reader.readline()
                writer.close()
                if answer.startswith(b"+PONG"):
                    return
            except OSError:
                pass
            self._alive("redis")
            await asyncio.sleep(0.05)
        raise HomeserverError(f"redis did not answer on {self.redis_port} within {timeout:g} s")

    # -- the workers ---------------------------------------------------------------------

    def worker_config(self, name: str) -> Path:
        # the sender serves the appservice ping too (deploy/workers/appservice1.yaml)
        listener_names = {"generic_worker1": ["client"], SENDER: ["client", "replication"]}.get(name, ["replication"])
        listeners = [
            {"type": "http", "port": self.ports[name], "bind_addresses": ["127.0.0.1"], "x_forwarded": True}
            | {"resources": [{"names": listener_names}]},
            {"type": "metrics", "port": self.metrics[name], "bind_addresses": ["127.0.0.1"]},
        ]
        log_config = self.folder / f"{name}.log.yaml"
        log = yaml.safe_load((self.main.folder / "homeserver.log.yaml").read_text())
        log["handlers"]["file"]["filename"] = str(self.folder / f"{name}.log")
        # the appservice scheduler's retries and backoff ("Scheduling retries on ID in Ns")
        log.setdefault("loggers", {})["synapse.appservice.scheduler"] = {"level": "INFO"}
        log_config.write_text(yaml.safe_dump(log))
        path = self.folder / f"{name}.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "worker_app": "synapse.app.generic_worker",
                    "worker_name": name,
                    "worker_listeners": listeners,
                    "worker_log_config": str(log_config),
                }
            )
        )
        return path

    def start_worker(self, name: str) -> None:
        self._spawn(
            name,
            [sys.executable, "-m", "synapse.app.generic_worker", "-c", str(self.main.config_path)]
            + ["-c", str(self.worker_config(name))],
        )

    async def worker_ready(self, name: str, timeout: float = 120) -> None:
        """Until the worker answers /health on its listener."""
        await self._http_ready(name, f"http://127.0.0.1:{self.ports[name]}/health", timeout)

    # -- nginx ---------------------------------------------------------------------------

    def start_nginx(self) -> None:
        prefix = self.folder / "nginx"
        prefix.mkdir(exist_ok=True)
        conf = prefix / "nginx.conf"
        made = subprocess.run(
            [
                sys.executable,
                str(DEPLOY / "nginx_conf.py"),
                "--listen",
                str(self.proxy_port),
                "--main",
                f"127.0.0.1:{self.main.port}",
                "--worker",
                f"127.0.0.1:{self.ports['generic_worker1']}",
                "--appservice-sender",
                f"127.0.0.1:{self.ports[SENDER]}",
                "--prefix",
                str(prefix),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        conf.write_text(made.stdout)
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self._spawn("nginx", [nginx, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")])

    # -- any process ---------------------------------------------------------------------

    def _spawn(self, name: str, command: list[str]) -> None:
        if name == "nginx":
            command = [*command, "-g", "daemon off;"]
        with open(self.folder / f"{name}.out", "ab") as output:
            self.procs[name] = subprocess.Popen(
                command,
                cwd=self.folder,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # a test run killed leaves no process behind
            )

    def _alive(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is not None:
            tail = (self.folder / f"{name}.out").read_text(errors="replace")[-2000:]
            log = self.folder / f"{name}.log"
            if log.exists():
                tail += "\n" + log.read_text(errors="replace")[-3000:]
            raise HomeserverError(f"{name} exited with {proc.returncode}:\n{tail}")

    async def _http_ready(self, name: str, url: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while time.monotonic() < deadline:
                self._alive(name)
                try:
                    async with http.get(url) as response:
                        if response.status == 200:
                            return
                except (TimeoutError, aiohttp.ClientError):
                    pass
                await asyncio.sleep(0.1)
        raise HomeserverError(f"{name} did not answer {url} within {timeout:g} s")

    def kill(self, name: str) -> None:
        """SIGKILL `name` (a worker, "redis", "nginx"; "main": the main process) at once."""
        if name == "main":
            self.main.kill()
            return
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    async def start_process(self, name: str) -> None:
        """Start `name` again (after `kill`) and wait until it serves."""
        if name == "main":
            await self.main.start(timeout=180)  # as at first: a loaded machine starts it slowly
        elif name == "redis":
            self.start_redis()
            await self.redis_ready()
        elif name == "nginx":
            self.start_nginx()
            await self._http_ready("nginx", f"http://127.0.0.1:{self.proxy_port}/_matrix/client/versions", 60)
        else:
            self.start_worker(name)
            await self.worker_ready(name)

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    async def stop(self) -> None:
        """SIGTERM every process, SIGKILL what is left after a grace; nginx first, Redis last."""
        order = ["nginx", *WORKERS, "redis"]
        for name in order:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 15
        while any(p.poll() is None for p in self.procs.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for name in list(self.procs):
            self.kill(name)

    # -- who sends the transactions ------------------------------------------------------

    async def _metric(self, name: str, metric: str) -> list[tuple[str, float]]:
        """(labels, value) of each series of `metric` in process `name`'s metrics; [] when the
        process does not answer (a test killed it)."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            try:
                async with http.get(f"http://127.0.0.1:{self.metrics[name]}/_synapse/metrics") as response:
                    text = await response.text()
            except (TimeoutError, aiohttp.ClientError):
                return []
        pattern = rf"^{re.escape(metric)}\{{([^}}]*)\}} (\S+)$"
        return [(labels, float(value)) for labels, value in re.findall(pattern, text, re.M)]

    async def appservice_transactions(self) -> dict[str, float]:
        """Synapse's counter of /transactions requests sent (all appservices), per process."""
        counts = {}
        for name in self.metrics:
            series = await self._metric(name, "synapse_appservice_api_sent_transactions_total")
            counts[name] = sum(value for _labels, value in series)
        return counts

    async def transactions_per_service(self, name: str = SENDER) -> dict[str, float]:
        """/transactions requests process `name` sent, per appservice id."""
        sent: dict[str, float] = {}
        for labels, value in await self._metric(name, "synapse_appservice_api_sent_transactions_total"):
            service = re.search(r'service="([^"]*)"', labels)
            if service:
                sent[service.group(1)] = sent.get(service.group(1), 0) + value
        return sent

    def retries_scheduled(self, service: str) -> list[float]:
        """The delays (s) of the sender's retries of appservice `service`, in the order it
        scheduled them (its log, since the homeserver started): each one a failed attempt,
        doubling up to 512 s until a transaction goes through."""
        log = self.folder / f"{SENDER}.log"
        if not log.exists():
            return []
        pattern = rf"Scheduling retries on {re.escape(service)} in ([0-9.]+)s"
        return [float(delay) for delay in re.findall(pattern, log.read_text(errors="replace"))]

    def taken_for_appservices(self, event_id: str) -> bool:
        """Whether the appservice sender has taken `event_id` from the event stream (queued it in
        memory for the appservices that want it): Synapse's `appservice_stream_position` is at or
        past the event's place in the stream."""
        with psycopg2.connect(**self.dsn) as db, db.cursor() as cursor:
            cursor.execute("SELECT stream_ordering FROM events WHERE event_id = %s", (event_id,))
            row = cursor.fetchone()
            cursor.execute("SELECT stream_ordering FROM appservice_stream_position")
            position = cursor.fetchone()
        db.close()
        return row is not None and position is not None and position[0] >= row[0]

    async def requests_served(self, name: str) -> dict[str, float]:
        """Client requests process `name` has served, per Synapse servlet (its metrics)."""
        served: dict[str, float] = {}
        for labels, value in await self._metric(name, "synapse_http_server_requests_received_total"):
            servlet = re.search(r'servlet="([^"]*)"', labels)
            if servlet:
                served[servlet.group(1)] = served.get(servlet.group(1), 0) + value
        return served


def _create_database(postgres: Cluster) -> None:
    admin = postgres.connect()
    admin.autocommit = True
    with admin.cursor() as cursor:  # Synapse wants C collation
        cursor.execute("CREATE DATABASE synapse TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C' ENCODING 'UTF8'")
    admin.close()


def _person_config(folder: Path, person: Person, hs_port: int) -> None:
    """folder/<name>/base.yaml (owner, its own prefix, bot and listener) and its registration."""
    place = folder / person.name
    place.mkdir(parents=True, exist_ok=True)
    person.as_port = worker_port()
    cfg = write_base_config(place, hs_port, person.as_port)
    data = yaml.safe_load((place / "base.yaml").read_text())
    data["owner"] = person.user_id
    data["appservice"].update(puppet_prefix=person.prefix, bot=person.bot, id=f"sidekicks-{person.name}")
    (place / "base.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    cfg.registration_path.unlink()  # made again for this person's prefix and bot
    import config
    import config.registration

    cfg = config.load(place / "base.yaml")
    config.registration.ensure(cfg)
    person.base_config, person.registration_path = place / "base.yaml", cfg.registration_path


@dataclass
class WorkersHomeserver(TestHomeserver):
    """The TestHomeserver of the worker setup: `url` is nginx; `workers` the other processes."""

    __test__ = False
    workers: Processes | None = None
    postgres: Cluster | None = None
    people: list[Person] = field(default_factory=list)

    def as_person(self, person: Person) -> TestHomeserver:
        """The same homeserver seen by `person`'s bridge: their base config and registration."""
        assert person.base_config is not None and person.registration_path is not None
        return _PersonView(
            url=self.url,
            domain=self.domain,
            as_port=person.as_port,
            registration_path=person.registration_path,
            owner_id=person.user_id,
            owner_password=person.password,
            stranger_id=self.stranger_id,
            stranger_password=self.stranger_password,
            folder=person.base_config.parent,
            server=self.server,
        )


class _PersonView(TestHomeserver):
    __test__ = False


async def sent_only_by_the_sender(hs: WorkersHomeserver, before: dict[str, float]) -> None:
    """Transactions went out since `before` (hs.workers.appservice_transactions()), every one of
    them, since the homeserver started, from the appservice worker."""
    assert hs.workers is not None
    after = await hs.workers.appservice_transactions()
    assert after.get(SENDER, 0) > before.get(SENDER, 0), (before, after)
    assert {name: count for name, count in after.items() if name != SENDER and count} == {}, after


@asynccontextmanager
async def synapse_with_workers(folder: Path, people: tuple[Person, ...] = (), workers: bool = True):
    """Start PostgreSQL, Redis, the main process, the three workers and nginx in `folder`; yield
    a WorkersHomeserver (users owner, stranger and each person's owner exist); stop them all.
    `workers=False`: the same Synapse on the same PostgreSQL as one process, no Redis, no nginx
    (what the worker benchmark compares with)."""
    folder.mkdir(parents=True, exist_ok=True)
    postgres = Cluster()
    processes: Processes | None = None
    main: MainProcess | None = None
    try:
        postgres.start()
        _create_database(postgres)
        proxy_port, main_port = worker_port(), worker_port()
        as_port = worker_port()
        hs_port = proxy_port if workers else main_port  # where the bridges and clients go
        cfg = write_base_config(folder, hs_port, as_port)
        registrations = [cfg.registration_path]
        for person in people:
            _person_config(folder, person, hs_port)
            assert person.registration_path is not None
            registrations.append(person.registration_path)
        replication, redis_port = worker_port(), worker_port()
        ports = {name: worker_port() for name in WORKERS}
        shared: dict[str, Any] = {
            "public_baseurl": f"http://127.0.0.1:{proxy_port}/",
            "database": {
                "name": "psycopg2",
                "args": {
                    "user": PG_USER,
                    "password": postgres.password,
                    "host": "127.0.0.1",
                    "port": postgres.port,
                    "database": "synapse",
                }
                | {"cp_min": 1, "cp_max": 5},
            },
            "enable_metrics": True,
            "redis": {"enabled": True, "host": "127.0.0.1", "port": redis_port},
            "worker_replication_secret": secrets.token_urlsafe(24),
            "instance_map": {
                "main": {"host": "127.0.0.1", "port": replication},
                PERSISTER: {"host": "127.0.0.1", "port": ports[PERSISTER]},
            },
            "stream_writers": {"events": PERSISTER},
            "notify_appservices_from_worker": SENDER,
        }
        if not workers:
            for key in ("redis", "worker_replication_secret", "instance_map", "stream_writers"):
                shared.pop(key)
            shared.pop("notify_appservices_from_worker")
            shared["public_baseurl"] = f"http://127.0.0.1:{main_port}/"
        main = MainProcess(
            folder / "synapse",
            port=main_port,
            appservice_files=registrations,
            relaxed_limits=True,
            encryption=False,
            shared=shared,
        )
        main.metrics_port = worker_port()
        processes = Processes(folder / "processes", main, redis_port, proxy_port, ports)
        if workers:
            processes.start_redis()
            await processes.redis_ready()
        await main.start(timeout=180)
        if workers:
            for name in WORKERS:
                processes.start_worker(name)
            for name in WORKERS:
                await processes.worker_ready(name)
            await processes.start_process("nginx")

        owner_password, stranger_password = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        owner_id = await main.register_user("owner", owner_password)
        stranger_id = await main.register_user("stranger", stranger_password)
        for person in people:
            await main.register_user(person.name, person.password)
        yield WorkersHomeserver(
            url=f"http://127.0.0.1:{hs_port}",
            domain="localhost",
            as_port=as_port,
            registration_path=cfg.registration_path,
            owner_id=owner_id,
            owner_password=owner_password,
            stranger_id=stranger_id,
            stranger_password=stranger_password,
            folder=folder,
            server=main,
            workers=processes,
            postgres=postgres,
            people=list(people),
        )
    finally:
        if processes is not None:
            await processes.stop()
        if main is not None:
            await main.stop()
        postgres.stop()
