"""Protobuf messages <-> shardcron's own dataclasses: the one translation the server and the client share."""
