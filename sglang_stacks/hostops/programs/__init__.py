"""The programs that run on a GPU host, as real files beside this module: bash (``*.sh``) and
Python (``*.py``, standard library only: a host may have nothing else), each with its contract
beside it (``server.sh`` and ``server_contract.py``; see `contract`), and `runner.call`, the one
runner of them all.

A program is shipped over the session the way every script is (nothing is installed on the
host): a bash program is the script itself, its parameters exported at its top as upper-case
variables; a Python program travels in the variable ``SGLANG_STACKS_PROGRAM`` and runs with the
host's system python3, isolated from the user's site-packages, through ``system_python.sh``, so
the command's standard input stays free for data. Parameters never carry secrets on a command
line: secrets go in ``stdin`` or in variables. A parameter that is a path on the host reaches the
program with its leading ``~/`` already expanded to the host user's home folder, so no program
repeats that expansion.
"""
