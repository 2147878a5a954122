"""One module per command, each readable top to bottom: parse nothing, build what the command
needs, run it."""
