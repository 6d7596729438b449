"""Multi-tenancy (issue 15): the pure decisions, with no I/O, ready to be wired.

- ``namespaces``: the namespace name rule (``default`` when none is named), a job's
  identity ``JobKey(namespace, id)``, and the exact bytes its shard hashes
  (``default`` hashes as before namespaces: no job moves on upgrade).
- ``scopes``: roles (read < write < admin), the role and reach of every RPC,
  ``authorize(token, call, namespace)``, and the identity a forwarded call keeps.
- ``tokens``: secrets, their stored SHA-256 hashes, and the token file.
- ``quotas``: per-namespace limits (jobs, admitted slots per second, running
  executions) and the refusals that name what was crossed.
- ``fair_queue``: weighted fair queuing of the starts that wait for a free executor.

How the next engineer wires them:

1. Job identity. The store's job and tick rows gain a ``namespace`` column (the
   migration fills ``default``) and are keyed by ``(namespace, id)``; every place
   that calls ``sharding.shard_for(job.id, n)`` calls ``namespaces.shard_of(key, n)``
   instead, so ``default`` jobs stay on their shards. Requests carry a namespace
   (``namespace_or_default``); the CLI reads ``--namespace``/``-n`` and
   ``SHARDCRON_NAMESPACE`` with ``namespace_from_cli``. Log lines and metric
   labels print ``str(key)`` or the namespace alone.
2. API. ``--auth-token-file`` is read with ``tokens.parse_token_file`` (old files of
   bare tokens keep working as admin on ``*``); the ``TokenCheck`` interceptor
   (api/security.py) finds the caller with ``TokenBook.identify`` (UNAUTHENTICATED
   when none), and each servicer method, once it knows the request's namespace,
   calls ``scopes.authorize(token, method_name, namespace)``: a ``Denied`` is
   PERMISSION_DENIED with its ``reason``. Lists and watches of ``*`` filter every
   row with ``scopes.may_read``, and so must GetCalendar's list of the jobs that
   name a calendar (calendars are cluster-wide, jobs are not). Every write's
   audit line carries ``token.name``.
3. Forwarding. routing.Router must send the CALLER's bearer token on (today it
   sends the node's own, which would widen every forwarded call), plus the node's
   in its own header; the leader identifies both with its own ``TokenBook`` and
   checks ``scopes.forwarded_identity(caller, node)``.
4. Quotas. PutJob/PutJobs read the namespace's usage (job count and the sum of
   ``quotas.job_rate`` over its jobs) in the store, and ``quotas.check_put``
   (PutJobs: ``admit_in_order``, one result per job) refuses with
   RESOURCE_EXHAUSTED and the refusal's ``reason`` before writing. A namespace's
   jobs span shards and so leaders: keep its usage in one row, locked and
   updated in the put's transaction, so two puts on two leaders cannot both
   take the last room. ``quotas.check_start`` with the namespace's running count
   is the ``eligible`` test of the fair queue's ``pop``: a start refused by
   ``max_running`` keeps waiting, and its place.
5. Fairness. The executor pool's slots are handed out by ``fair_queue.FairQueue``:
   the scheduling loop enqueues a due start (``enqueue(namespace, item, now)``)
   when every executor is busy, and each executor that frees pops the next one
   (``pop(now, eligible)``); starts of a shard the node stops leading are taken
   back with ``remove_where``, never silently dropped;
   ``Served.waited_s`` feeds ``shardcron_namespace_wait_seconds{namespace}``, and
   the tick records its real start. Weights come from the namespace's settings.
"""
