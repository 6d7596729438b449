"""Failure notifications (issue 14 item 6): a job's ``on_failure`` and ``on_recovery`` executor specs,
and the cluster-wide default a node's flags give.

``owed.py`` decides (pure) which notifications a settled tick owes, ``rate.py`` the default's rate
limit, ``spec.py`` parses a spec from a job file, the CLI or a node flag, ``context.py`` gives each
notification its own identity, and ``notifier.py`` is the thin loop that claims them under the
shard's fence (``store/notifications.py``) and sends them.
"""
