"""The dashboard's bar that attaches it to a v2 server by URL."""
