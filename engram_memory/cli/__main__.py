"""``python -m engram_memory.cli``: the same as the ``engram-memory`` command."""

from engram_memory.cli import main

raise SystemExit(main())
