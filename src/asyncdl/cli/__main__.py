"""``python -m asyncdl.cli``: the ``asyncdl`` command."""

from . import main

main()
