"""``python -m layerlab.cli``: the command line."""

from layerlab.cli import main

raise SystemExit(main())
