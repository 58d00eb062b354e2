"""How the process's file descriptors are shared between the v2 ports' connections.

Every open connection holds a descriptor; once ``RLIMIT_NOFILE`` is reached no port can accept,
so a flood of idle connections to one port would stop health probes on another. The automatic
connection caps take fixed shares of the soft limit: HTTP half (``--http-max-connections 0``),
gRPC a quarter (``--grpc-max-connections 0``), each at most :data:`AUTO_MAX_CONNECTIONS`, so
both together never take more than three quarters; the rest is for models, repository files,
the metrics port and logs. tritonserver has neither cap.
"""

from __future__ import annotations

import resource

#: an automatic connection cap never exceeds this many connections
AUTO_MAX_CONNECTIONS = 4096

#: the least an automatic cap allows, however low the open-file limit
MIN_AUTO_CONNECTIONS = 16

#: the share of the soft open-file limit each port's automatic cap takes
HTTP_SHARE, GRPC_SHARE = 1 / 2, 1 / 4


def auto_max_connections(share: float) -> int:
    """``share`` of the soft ``RLIMIT_NOFILE``, at least :data:`MIN_AUTO_CONNECTIONS`, at most
    :data:`AUTO_MAX_CONNECTIONS` (which an unlimited soft limit gives)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return AUTO_MAX_CONNECTIONS
    return max(MIN_AUTO_CONNECTIONS, min(AUTO_MAX_CONNECTIONS, int(soft * share)))


__all__ = ["AUTO_MAX_CONNECTIONS", "GRPC_SHARE", "HTTP_SHARE", "MIN_AUTO_CONNECTIONS", "auto_max_connections"]
