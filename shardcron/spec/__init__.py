"""What a valid job is, with no I/O: its fields and bounds, its schedule, its executor, its notifications, job files."""
