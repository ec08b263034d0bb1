"""``python -m veil``: the command line, as the ``veil`` script runs it.

Run as a file (``spark-submit …/veil/__main__.py query …``, which runs a path, not a module),
Python puts this package's own folder first on ``sys.path``, where ``veil/random.py`` would
hide the standard library's ``random``; that entry is dropped before anything else is
imported.
"""

import os
import sys

if sys.path and os.path.realpath(sys.path[0] or os.curdir) == os.path.dirname(
    os.path.realpath(__file__)
):
    del sys.path[0]

from veil.cli import main

if __name__ == "__main__":
    main()
