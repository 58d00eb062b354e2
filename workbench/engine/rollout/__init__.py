"""Rollouts (a product extension, Triton has none): the weighted split set and changed, the mirror and
its agreement, promote and roll back (the split itself is chosen by the lifecycle:
:mod:`workbench.engine.models.rollout_split`)."""
