"""One shard's election, after etcd's ``concurrency.Election``.

``campaign`` puts ``<prefix>/shard/<k>/<lease hex>`` only if it is absent,
bound to the session lease. The key with the lowest create revision leads,
and that revision is the shard's fencing token (``rev``). The wait for the
next-older key's deletion is delivered by the node's prefix watch (one watch
stream for all shards rather than one per shard); ``is_leader_now`` then
proves leadership with a linearizable read before anything acts on it.
``proclaim`` and ``resign`` act only while the key is still the same
incarnation (its create revision matches).
"""

from __future__ import annotations

import json

from shardcron.coordination.etcd import Etcd
from shardcron.coordination.keys import KeyLayout
from shardcron.coordination.session import Session
from shardcron.errors import SessionLost


class Election:
    def __init__(self, etcd: Etcd, session: Session, layout: KeyLayout, shard: int):
        self._etcd = etcd
        self._session = session
        self._prefix = layout.shard(shard)
        self.shard = shard
        self.key = layout.candidate(shard, session.lease_id)
        self.rev = 0  # create revision of our key: the fencing token once we lead

    @property
    def campaigning(self) -> bool:
        return self.rev > 0

    def campaign(self, value: dict[str, object]) -> int:
        """Place our candidate key (idempotent for this session). Returns its create revision."""
        if self._session.done.is_set():
            raise SessionLost(self._session.lost_reason or "session lost")
        created, kv = self._etcd.put_if_absent(self.key, json.dumps(value).encode(), self._session.lease_id)
        if kv is None:
            raise SessionLost(f"candidate key {self.key} vanished right after it was written: lease gone")
        if not created and kv.lease != self._session.lease_id:
            raise SessionLost(f"candidate key {self.key} belongs to another lease")
        self.rev = kv.create_revision
        return self.rev

    def is_leader_now(self) -> bool:
        """True when no key older than ours is left: a linearizable read, not the mirror."""
        return self.campaigning and self._etcd.newest_created_before(self._prefix, self.rev) is None

    def proclaim(self, value: dict[str, object]) -> bool:
        """Rewrite our key's value (leader since, job count) while it is still ours."""
        return self.campaigning and self._etcd.put_if_created_at(
            self.key, json.dumps(value).encode(), self.rev, self._session.lease_id
        )

    def resign(self) -> None:
        """Delete our key if it is still the one we created: the next candidate leads at once."""
        if self.campaigning:
            self._etcd.delete_if_created_at(self.key, self.rev)
        self.rev = 0
