"""The reference pages of the documentation site, generated from the code so that they cannot drift.

``make docs-reference`` (``python -m shardcron.dev.docs_reference``) rewrites the
generated part of each page of ``docs/reference/``; the hand-written prose above
and below it stays as it is (``markdown.splice``). ``tests/docs/test_reference.py``
fails when a committed page differs from a fresh generation, naming what differs.

Each page has one module here, and each module imports only what its page
documents: the CLI's parsers, the spec, the proto, the metrics registry, the API's
limits, the sharding rule.
"""
