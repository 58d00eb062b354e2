"""The model lifecycle (Triton's ``ModelLifecycle``): how each model's versions load, switch, drain
and unload, their states, the registry of entries, load threads, warmup and the ensembles' load order.
It never reaches :mod:`workbench.engine.manager` (``tests/architecture/test_layers.py``)."""
