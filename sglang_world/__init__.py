"""What an SGLang release decides about memory, its KV pool and scheduling, per release.

Every number here is recorded from the release's own code (its wheel, run in a child interpreter
with stand-ins), never typed by hand. Stdlib only: the emulator carries this package to its hosts.
"""
