"""One module per `hetmem` verb; each defines a Command class (see hetmem.cli)."""
