"""The shared leaves every layer uses: the one error tree, wire datatypes and their byte codec, the
typed results (Triton's JSON shapes) and the on/off words. They import nothing above them."""
