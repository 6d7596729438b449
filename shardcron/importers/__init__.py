"""Importers: schedules from where they live today (a crontab, a Celery app's ``beat_schedule``, Kubernetes
CronJobs, an APScheduler job store), translated into a shardcron job file by ``shardcron import``.

Each importer reads its source and returns an ``ImportResult`` (``importers.result``): the jobs as a job file
holds them, each with where it came from and what was approximated, and every entry it refused with the reason.
Nothing is dropped silently.
"""
