"""Model repositories: remote (s3) ones, file overrides, how files are opened and confined."""
