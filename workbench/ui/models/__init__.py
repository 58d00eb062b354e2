"""The Models tab: every model and version with its state and served config."""
