"""The engine: model lifecycle, the repository manager and polling, shared memory, rollouts, settings."""
