"""The repository manager (Triton's ``ModelRepositoryManager``): which models load and when, the poll
loop, the ensembles' dependency recheck and config edits; it calls :mod:`workbench.engine.models`."""
