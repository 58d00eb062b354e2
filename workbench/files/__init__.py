"""A repository's files, read safely: bounded file-system calls and how model files are opened and walked."""
