"""Bench scripts, compat harnesses, the native build, the venv set-up and ``workbench perf``."""
