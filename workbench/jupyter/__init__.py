"""The Jupyter host: a jupyter_server extension running the workbench engine on the Jupyter
server's event loop (:class:`~workbench.jupyter.extension.Workbench`).

Enabled by the ``jupyter_server_config.d/workbench.json`` the package installs, or by
``jupyter server extension enable workbench.jupyter``; configured with ``c.Workbench.*``
traitlets (see docs/jupyter.md). Like the other hosts, it uses the
engine only through the names ``workbench`` exports.
"""

from __future__ import annotations

from workbench import __version__
from workbench.jupyter.extension import Workbench


def _jupyter_server_extension_points() -> list[dict]:
    """jupyter_server's discovery hook: the extension application of this package."""
    return [{"module": "workbench.jupyter", "app": Workbench}]


__all__ = ["Workbench", "__version__"]
