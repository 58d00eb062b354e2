"""The Python backend: stubs, pb_utils, BLS, decoupled models, its lifecycle."""
