"""The architecture's rules checked on the source: layers, seams, library internals, ARCHITECTURE.md."""
