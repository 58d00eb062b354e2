"""What every host of the engine shares, below the hosts: binding the standard v2 ports
(:mod:`~workbench.serving.ports`, :mod:`~workbench.serving.sockets`), the HTTP, gRPC and metrics
listeners on them, and the engine's drain on shutdown (:mod:`~workbench.serving.drain`).

``workbench serve`` (:mod:`workbench.hosts`), the Jupyter extension (:mod:`workbench.jupyter`)
and the dashboard's process launcher (:mod:`workbench.ui`) import these modules; none of them
imports another host (``tests/architecture/test_layers.py``).
"""
