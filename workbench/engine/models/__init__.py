"""The model lifecycle (Triton's ``ModelLifecycle``): how each model's versions load, switch, drain
and unload, their states, the registry of entries, load threads, warmup, the ensembles' load order
and the version an unversioned request runs on (a rollout's split).
It never reaches :mod:`workbench.engine.manager` (``tests/architecture/test_layers.py``)."""
