"""``python -m tests.bench``: run the benchmarks (see :mod:`tests.bench`)."""

from .run import main

raise SystemExit(main())
