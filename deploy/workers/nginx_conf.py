"""nginx in front of Synapse with workers: the routes come from Synapse's own endpoint list.

    python3 deploy/workers/nginx_conf.py --listen 8008 --main 127.0.0.1:8080 \\
        --worker 127.0.0.1:8083 --appservice-sender 127.0.0.1:8084 [--prefix DIR] > nginx.conf
    nginx -p DIR -c nginx.conf

Every client request whose path (and method) matches a line of generic_worker.endpoints (the list
of Synapse's worker documentation, copied as it is) goes to the generic worker; every other request
goes to the main process. Nothing is chosen by hand here: the list is the router
(deploy/README.md "Beyond one machine").

One route is added to it: the appservice ping goes to the appservice sender when one is given.
Synapse serves the ping in any process with a client listener, and the process that answers it
retries the bridge's backlog at once (`force_retry`), but only the sender holds that backlog: a
ping answered by the main process leaves a restarted bridge waiting out the sender's backoff, up
to 512 s.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

ENDPOINTS = Path(__file__).with_name("generic_worker.endpoints")
# the parts of the list this setup serves: no federation listener (a homeserver of its own)
SERVED = ("^/_matrix/client/", "^/_synapse/")
# the appservice ping (POST /_matrix/client/v1/appservice/{id}/ping): to the appservice sender
PING = ("POST", "^/_matrix/client/v1/appservice/[^/]+/ping$")


def routes(text: str) -> list[tuple[str, str]]:
    """(method, path pattern) of each served line of the endpoint list; method "" is any."""
    method, found = "", []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            method = "" if section == "any" else section
            continue
        if line.startswith(SERVED):
            found.append((method, line))
    return found


def config(listen: int, main: str, worker: str, prefix: Path, endpoints: str, sender: str | None = None) -> str:
    """nginx.conf: one server on 127.0.0.1:`listen`, routing by `$request_method $uri`; the
    appservice ping to `sender` if given (nginx takes the first matching regex: it comes first)."""
    lines = []
    upstreams = [f"upstream main {{ server {main}; }}", f"upstream generic_worker {{ server {worker}; }}"]
    found = [(method, pattern, "generic_worker") for method, pattern in routes(endpoints)]
    if sender:
        upstreams.append(f"upstream appservice_sender {{ server {sender}; }}")
        found.insert(0, (*PING, "appservice_sender"))
    for method, pattern, upstream in found:
        # the map's key is "METHOD /path": the docs' "^/path" becomes "^METHOD /path"
        verb = method or r"[A-Z]+"
        key = f"~^{verb} {pattern[1:]}"
        lines.append(f'        "{key}" {upstream};')
    # as root, nginx's workers would drop to `nobody`, who cannot write the prefix's folders
    user = f"user {getpass.getuser()};\n" if os.geteuid() == 0 else ""
    return f"""# Made by deploy/workers/nginx_conf.py from {ENDPOINTS.name}: do not edit by hand.
{user}worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    client_max_body_size 100M;

{chr(10).join("    " + upstream for upstream in upstreams)}

    map "$request_method $uri" $synapse {{
        default main;
{chr(10).join(lines)}
    }}

    server {{
        listen 127.0.0.1:{listen};
        location / {{
            proxy_pass http://$synapse;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_read_timeout 600s;
            proxy_buffering off;
        }}
    }}
}}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=int, default=8008, help="nginx's port on 127.0.0.1")
    parser.add_argument("--main", default="127.0.0.1:8080", help="the main process's client listener")
    parser.add_argument("--worker", default="127.0.0.1:8083", help="the generic worker's client listener")
    parser.add_argument(
        "--appservice-sender", help="the appservice sender's client listener: the appservice ping goes there"
    )
    parser.add_argument("--prefix", type=Path, default=Path.cwd(), help="nginx's folder: pid, logs, temp")
    args = parser.parse_args(argv)
    text = config(
        args.listen, args.main, args.worker, args.prefix.resolve(), ENDPOINTS.read_text(), args.appservice_sender
    )
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
