"""Generated from protos/shardcron/v1/ by scripts/gen-proto.sh; never edited by hand.

Only ``shardcron.api`` and ``shardcron.api.client`` import these modules.
"""
