"""The server surface: ``Server`` (a facade every frontend calls) and the services behind its metadata,
log / trace settings and statistics methods."""
