"""Model repositories: where model folders live and which of them exist."""
