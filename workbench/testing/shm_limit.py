"""A small /dev/shm as a Python model's stub sees it (test models ``shm_limited`` and
``bls_shm_limited``): what Triton's CI gets from ``docker --shm-size=1g`` for its 512 MiB /
1 GiB tensors, on a host whose /dev/shm is larger."""

from __future__ import annotations

import errno
import json
import os
from typing import Any


def limit_shm_from_config(args: dict[str, Any]) -> None:
    """From now on, this process's ``os.posix_fallocate`` fails with ENOSPC for a range
    ending past the model config's parameter ``SHM_LIMIT_BYTES`` (bytes), as tmpfs does for a
    range larger than the file system. ``args``: ``initialize``'s argument."""
    parameters = json.loads(args["model_config"])["parameters"]
    limit = int(parameters["SHM_LIMIT_BYTES"]["string_value"])
    real = os.posix_fallocate

    def limited(fd: int, offset: int, length: int) -> None:
        if offset + length > limit:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, offset, length)

    os.posix_fallocate = limited
