"""Pure decisions, table-tested: when slots fall, calendars, catch-up and overlap, jitter, retention, backfill plans, takeover, fair queuing, quotas, scopes, notifications owed."""
