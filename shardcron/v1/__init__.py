"""Generated from protos/shardcron/v1/ by scripts/gen-proto.sh; never edited by hand.

Only ``shardcron.wire``, ``shardcron.api`` and ``shardcron.client`` import these modules.
"""
