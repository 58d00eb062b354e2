"""The engine: the one public ``Server`` object and what it owns."""
