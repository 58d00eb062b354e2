"""Per model-version inference statistics (Triton's statistics extension) and the custom metrics
families Python models create."""
