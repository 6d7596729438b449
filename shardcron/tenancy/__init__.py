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

Where they are wired:

- A job's key (``keys``) is what a node and its store hold: ``api/convert.py`` and
  the servicers turn a request's (namespace, id) into it and back; the CLI reads
  ``-n``/``SHARDCRON_NAMESPACE`` (``namespace_from_cli``); ``logs.py`` splits it.
- ``api/auth.py`` identifies the caller (``tokens.TokenBook`` of the token file and
  the store's ``api_tokens``, ``api/token_source.py``), checks ``scopes.authorize``
  for every namespace a request names, and filters reads of ``*`` (``may_see``,
  ``readable_namespaces``); ``api/routing.py`` forwards the caller's secret and the
  node's own, and the leader checks ``scopes.forwarded_identity``.
- ``store/namespaces.py`` takes and gives back a namespace's usage under its row's
  lock in every job write (``quotas.admit_in_order``); ``coordination/namespace_watch.py``
  hands each node's scheduler the weights and quotas (``settings``).
- ``scheduling/exec_gate.py`` serves the starts that wait for an executor slot with
  ``fair_queue.FairQueue`` and ``quotas.check_start`` (``max_running``).
"""
