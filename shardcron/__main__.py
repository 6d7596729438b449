from shardcron.cli import main

raise SystemExit(main())
