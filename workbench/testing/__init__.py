"""Test support: tiny real models and repository builders (used by the test suite)."""
