"""What a server starts with: ``ServerOptions``, how each option is spelled as a ``workbench serve``
flag, and the restricted API groups."""
