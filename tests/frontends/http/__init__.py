"""The HTTP frontend."""
