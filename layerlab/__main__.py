"""``python -m layerlab``: the command line."""

from layerlab.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
