"""What every host shares: ports and listeners, the headless switch, ``workbench serve``'s flags, live statistics."""
