"""``python -m layerscope``: the same as the ``layerscope`` command."""

import sys

from layerscope.cli import main

sys.exit(main())
