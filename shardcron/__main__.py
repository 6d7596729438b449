"""``python -m shardcron``: the ``shardcron`` command."""

from shardcron.cli import main

raise SystemExit(main())
