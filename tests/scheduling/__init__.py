"""Schedulers: the dispatcher, dynamic and sequence batchers, ensembles, the rate limiter."""
