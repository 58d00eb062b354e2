"""An nginx load balancer in front of ``workbench serve`` replicas, for users without Kubernetes:
``nginx/nginx.conf`` of ``workbench deploy`` (:func:`nginx_config`).

One file, runnable unprivileged from its own folder (``nginx -p nginx/ -c nginx.conf -e
stderr``: pid, logs and temporary files are relative to the prefix), with two listeners:

- HTTP (the v2 REST API) to an ``upstream`` of the replicas' HTTP ports over HTTP/1.1
  keep-alive connections;
- gRPC (Triton's ``GRPCInferenceService``) through ``grpc_pass`` to the replicas' gRPC ports.

Retries: nginx passes a request to the next replica on a *connection* error (a replica that
stopped or restarts refuses the connection before anything was sent) and on a connect timeout,
never after it sent the request: infer is a POST and a replica may already have run it, so
``proxy_next_upstream ... non_idempotent`` (and re-running a request on a stateful sequence
model) stays off. Zero failed requests through a rolling restart come from the replicas'
drain (``workbench serve`` on SIGTERM, as tritonserver's: the listening sockets refuse new
connections at once; requests arriving on an open HTTP connection keep being served until nginx
closes it or the exit timeout runs out; the gRPC server stops at once, and nginx opens a new
gRPC connection per request), not from retrying requests that were sent.
The gRPC upstream has no keep-alive connections for that reason (see the config's comment).
A replica killed outright (SIGKILL, OOM) costs exactly the requests it was running: nginx
answers those 502 (HTTP) / UNAVAILABLE (gRPC).
"""

from __future__ import annotations

from dataclasses import dataclass

#: the replica addresses ``workbench deploy --nginx-replicas`` defaults to: three replicas on
#: one host, HTTP port N, gRPC port N+1, metrics port N+2 for N = 8010, 8020, 8030
DEFAULT_REPLICAS = ("127.0.0.1:8010", "127.0.0.1:8020", "127.0.0.1:8030")

#: nginx's access-log format: what a rolling-restart check reads back (request start and
#: duration in seconds, the replicas tried, in order, and their statuses)
#: ("|" between fields: ``$upstream_addr`` lists retries as "a, b")
LOG_FORMAT = "|".join(("$msec", "$request_time", "$request_method", "$status", "$server_port",
                       "$upstream_addr", "$upstream_status", "$request_uri"))


@dataclass(frozen=True)
class Replica:
    """One ``workbench serve`` replica: ``host``, its HTTP port and its gRPC port."""

    host: str
    http_port: int
    grpc_port: int

    @classmethod
    def parse(cls, text: str) -> Replica:
        """``HOST:HTTP_PORT`` (gRPC on HTTP_PORT+1, as tritonserver's 8000/8001) or
        ``HOST:HTTP_PORT:GRPC_PORT``.

        Raises:
            ValueError: no host, or a port that is not a number in 1..65535.
        """
        parts = text.strip().rsplit(":", 2) if text.count(":") >= 2 else text.strip().rsplit(":", 1)
        if len(parts) < 2 or not parts[0]:
            raise ValueError(f"replica '{text}' is not HOST:HTTP_PORT[:GRPC_PORT]")
        try:
            ports = [int(p) for p in parts[1:]]
        except ValueError:
            raise ValueError(f"replica '{text}' has a port that is not a number") from None
        if len(ports) == 1:
            ports.append(ports[0] + 1)
        if any(not 1 <= p <= 65535 for p in ports):
            raise ValueError(f"replica '{text}' has a port outside 1..65535")
        return cls(parts[0], ports[0], ports[1])


@dataclass(frozen=True)
class NginxSpec:
    """The knobs of :func:`nginx_config`.

    Attributes:
        replicas: the ``workbench serve`` replicas (:class:`Replica`).
        http_port, grpc_port: where nginx listens (HTTP, gRPC).
        listen_address: the address nginx binds ("" = every address).
        max_body: ``client_max_body_size``: the largest request (tensors in JSON or binary;
            an nginx size such as ``256m``; Triton itself has no limit).
        timeout_s: seconds nginx waits for a replica's answer (read/send timeouts: a long
            inference or a slow batch queue, not a dead replica: that is a connection error).
        connect_timeout_s: seconds to connect to a replica before trying the next one.
        worker_processes: nginx workers (``auto`` = one per core).
    """

    replicas: tuple[Replica, ...] = tuple(Replica.parse(r) for r in DEFAULT_REPLICAS)
    http_port: int = 8000
    grpc_port: int = 8001
    listen_address: str = ""
    max_body: str = "256m"
    timeout_s: int = 300
    connect_timeout_s: int = 2
    worker_processes: str = "auto"

    def __post_init__(self) -> None:
        if not self.replicas:
            raise ValueError("nginx needs at least one replica")
        if self.http_port == self.grpc_port:
            raise ValueError("nginx's HTTP and gRPC ports must differ")


def _listen(spec: NginxSpec, port: int) -> str:
    return f"{spec.listen_address}:{port}" if spec.listen_address else str(port)


def nginx_config(spec: NginxSpec) -> str:
    """The whole ``nginx.conf`` (text) balancing ``spec.replicas`` round robin.

    Follows what nginx documents for each directive: ``keepalive`` upstream connections need
    ``proxy_http_version 1.1`` and an empty ``Connection`` header; a request is passed to the
    next replica only on ``error timeout`` (connection errors and connect timeouts; never
    ``non_idempotent``: see the module docstring); request bodies are buffered
    (``proxy_request_buffering on``) so that a retry can resend them; the streaming endpoint
    ``generate_stream`` (server-sent events) is not buffered on its way back.
    """
    http_servers = "\n".join(f"        server {r.host}:{r.http_port} max_fails=1 fail_timeout=2s;"
                             for r in spec.replicas)
    grpc_servers = "\n".join(f"        server {r.host}:{r.grpc_port} max_fails=1 fail_timeout=2s;"
                             for r in spec.replicas)
    tries = len(spec.replicas)
    t = spec.timeout_s
    return f"""\
# Generated by `workbench deploy`: nginx in front of {len(spec.replicas)} `workbench serve` replicas.
# Run it from this folder, as any user:  nginx -p "$PWD" -c nginx.conf -e stderr
# (reload after editing the replicas: nginx -p "$PWD" -c nginx.conf -s reload)
worker_processes {spec.worker_processes};
pid nginx.pid;
error_log stderr warn;

events {{
    worker_connections 4096;
}}

http {{
    log_format workbench '{LOG_FORMAT}';
    access_log access.log workbench;
    client_body_temp_path tmp/client_body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;

    # tensors: large bodies, kept in memory up to 8 MiB before spilling to tmp/
    client_max_body_size {spec.max_body};
    client_body_buffer_size 8m;
    proxy_buffer_size 64k;
    proxy_buffers 64 64k;
    proxy_busy_buffers_size 256k;

    # keepalive_timeout below the replicas' --http-keepalive-timeout (5 s): nginx, not the
    # replica, closes an idle connection, so it never writes a request on one being closed
    upstream workbench_http {{
{http_servers}
        keepalive 64;
        keepalive_requests 100000;
        keepalive_timeout 4s;
    }}

    # no keepalive: nginx's gRPC proxy sends one request per upstream connection at a time
    # anyway, and a new connection per request is what moves traffic off a draining replica
    # (its listener refuses at once); a cached one would carry requests until the replica's
    # gRPC stop, which cancels any RPC arriving after it, and nginx cannot resend those
    upstream workbench_grpc {{
{grpc_servers}
    }}

    server {{
        listen {_listen(spec, spec.http_port)} reuseport;
        keepalive_requests 100000;

        location / {{
            proxy_pass http://workbench_http;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_request_buffering on;
            # a replica that stopped or restarts refuses the connection: try the next one; a
            # request already sent is never re-sent (POST: it may have run)
            proxy_next_upstream error timeout;
            proxy_next_upstream_tries {tries};
            proxy_next_upstream_timeout {spec.connect_timeout_s * tries}s;
            proxy_connect_timeout {spec.connect_timeout_s}s;
            proxy_send_timeout {t}s;
            proxy_read_timeout {t}s;
        }}

        # server-sent events: each event goes to the client as the replica writes it
        location ~ ^/v2/models/[^/]+(/versions/[0-9]+)?/generate_stream$ {{
            proxy_pass http://workbench_http;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_buffering off;
            proxy_next_upstream error timeout;
            proxy_next_upstream_tries {tries};
            proxy_connect_timeout {spec.connect_timeout_s}s;
            proxy_read_timeout {t}s;
        }}
    }}

    server {{
        listen {_listen(spec, spec.grpc_port)} http2 reuseport;
        keepalive_requests 100000;
        client_body_timeout {t}s;

        location / {{
            grpc_pass grpc://workbench_grpc;
            grpc_next_upstream error timeout;
            grpc_next_upstream_tries {tries};
            grpc_next_upstream_timeout {spec.connect_timeout_s * tries}s;
            grpc_connect_timeout {spec.connect_timeout_s}s;
            grpc_send_timeout {t}s;
            grpc_read_timeout {t}s;
            grpc_socket_keepalive on;
        }}
    }}
}}
"""


__all__ = ["DEFAULT_REPLICAS", "LOG_FORMAT", "NginxSpec", "Replica", "nginx_config"]
