"""The Headless tab: a ``workbench serve`` child process on the current repository."""
