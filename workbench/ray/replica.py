"""One Serve replica: an engine started from the application's :class:`ServerOptions`, the
v2 HTTP app (``workbench.frontends.http.create_app``) as the replica's ASGI ingress, and the
engine's gRPC frontend on the replica's loopback for :mod:`workbench.ray.grpc_relay`.

Serve waits for a replica's requests in flight before it stops one (``graceful_shutdown_*``,
set from ``--exit-timeout-secs`` by :func:`workbench.ray.application.build_app`); the engine is then
stopped in ``__del__`` (its models unloaded, its stubs stopped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

from ray import serve

from workbench import Server, ServerOptions
from workbench.frontends.grpc.server import create_grpc_server
from workbench.frontends.http import create_app
from workbench.ray.broadcast import ClusterIngress, beat, follow, replay
from workbench.ray.cluster_state import state_actor
from workbench.ray.grpc_relay import Relay, relay_methods
from workbench.ray.queue_signal import QueueTime

log = logging.getLogger("workbench")


def replica_options(options: dict[str, Any]) -> ServerOptions:
    """The application's options as one replica runs them: its gRPC frontend on a free
    loopback port (the cluster's gRPC ingress is Serve's proxy) and no port sharing."""
    return ServerOptions.model_validate(options).model_copy(update={
        "allow_grpc": True, "grpc_address": "127.0.0.1", "grpc_port": 0, "reuse_grpc_port": False,
        "grpc_max_connection_age_ms": 0})


class EngineReplica:
    """The body of the Serve deployment (decorated by :func:`workbench.ray.application.build_app`).

    Args:
        options: ``ServerOptions.model_dump()`` of the application (plain data: Serve
            pickles it to every replica).
    """

    async def __init__(self, options: dict[str, Any]) -> None:  # type: ignore[misc]  # Serve awaits it
        self.options = replica_options(options)
        self.server = Server(self.options)
        self.queue = QueueTime()
        self.server.add_success_observer(self.queue.observe)
        await self.server.start()
        self.grpc_server, port = create_grpc_server(self.server, self.options)
        await self.grpc_server.start()
        self.relay = Relay(f"127.0.0.1:{port}", self.options.grpc_max_message_size)
        self.engine_app = create_app(self.server)  # (`app` is Serve's ASGI wrapper's)
        replica_id = serve.get_replica_context().replica_id
        self.replica = replica_id.unique_id
        self.state = state_actor(replica_id.deployment_id.app_name)
        # the cluster's state first (models, versions, rollouts loaded through the ingress), then serve
        applied, replayed = await replay(self.engine_app, self.state, self.replica)
        self.tasks = [asyncio.create_task(follow(self.engine_app, self.state, self.replica, applied)),
                      asyncio.create_task(beat(self.state, self.replica))]
        log.info("workbench replica %s ready (pid %d, engine gRPC on 127.0.0.1:%d, %d operations replayed)",
                 self.replica, os.getpid(), port, replayed)

    def __serve_build_asgi_app__(self) -> Any:
        """The v2 HTTP app over this replica's engine (Serve's late-bound ingress), its
        control requests made cluster-wide (:class:`~workbench.ray.broadcast.ClusterIngress`)."""
        return ClusterIngress(self.engine_app, self.state, self.replica)

    def record_autoscaling_stats(self) -> dict[str, float]:
        """Serve's custom autoscaling metrics hook: the mean queue µs per request since the
        last call (:class:`~workbench.ray.queue_signal.QueueTime`)."""
        return self.queue.sample()

    async def check_health(self) -> None:
        """Serve's health check: a live engine (raises when it is not)."""
        if not self.server.is_live():
            raise RuntimeError("the engine is not live")

    async def __del__(self) -> None:
        for task in getattr(self, "tasks", ()):
            task.cancel()
        with contextlib.suppress(Exception):
            await self.state.unregister.remote(self.replica)
        await self.relay.close()
        await self.grpc_server.stop(None)
        await self.server.stop()


for _name, _method in relay_methods().items():
    setattr(EngineReplica, _name, _method)


def ingress_class() -> Any:
    """:class:`EngineReplica` wrapped as Serve's ASGI ingress (app built on each replica)."""
    return serve.ingress()(EngineReplica)
