"""etcd itself fails under a running cluster: one member (its leader) dies, then a quorum is lost."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from sqlalchemy import select

from shardcron.dev.testing.cluster import wait_until
from shardcron.store.schema import ticks
from tests.faults import etcd_raft
from tests.faults.harness import sleep_until

pytestmark = pytest.mark.faults


def test_the_etcd_client_moves_to_a_live_member_when_its_member_dies(figures):
    """The node's etcd client must reach the two live members within a few seconds of losing its own.

    (Quick, no namespaces: the root cause behind scenario 4's dropped shards, if it fails.)
    """
    from shardcron.coordination.etcd import Etcd
    from shardcron.dev.testing.etcd_server import EtcdCluster

    figures["scenario"] = "4a. etcd client failover (no network faults)"
    with EtcdCluster(3) as cluster:
        client = Etcd(cluster.endpoints, timeout_s=1.0)
        try:
            client.status()
            in_use = str(client._client.endpoint_in_use)
            dead = next(m for m in cluster.members if f":{m.client_port}" in in_use)
            cluster.kill(dead)
            t0 = time.time()
            errors = []

            def answers():
                try:
                    client.status()
                    return True
                except Exception as e:  # noqa: BLE001 - counted, then retried
                    errors.append(str(e)[:200])
                    return False

            try:
                ok = bool(wait_until(answers, 8, 0.25, "a live member to answer"))
            except TimeoutError:
                ok = False
            took = time.time() - t0
            figures["failover measured"] = f"{took:.2f} s" if ok else f"never within {took:.0f} s"
            figures["theoretical window"] = "well under TTL/3 (before the next lease renewal is due)"
            figures["calls failed meanwhile"] = len(errors)
            assert ok, (
                f"the client stayed on the dead member {dead.endpoint} for {took:.1f} s while "
                f"{len(cluster.members) - 1} members kept a quorum; last error: {errors[-1:]}"
            )
        finally:
            client.close()


# -- scenario 4: the arithmetic --------------------------------------------------------------
#
# A node renews its lease every R = TTL/3 and gives its session up TTL after the *send* of the last renewal
# etcd confirmed. Killed at the worst moment, that renewal went out R before the kill: the node has TTL - R from
# the kill to get one renewal through. etcd answers a renewal only through a raft leader, and once the leader
# is killed the survivors first wait out an election timeout: heartbeat 100 ms, election timeout T = 1000 ms
# (the harness's flags, etcd's defaults), randomised per member and per round in [T, 2T). A round usually
# elects, so etcd is leaderless for W = 1-2 s; a split vote (the first candidate's timeout came up near T and
# the other survivor, still inside the old leader's lease, ignored it; then both stood in the same term) costs
# another [T, 2T). Shortening T instead would make a loaded machine elect spuriously, and operators run the
# defaults, so the test picks its TTL: at 6 s (R = 2 s) the nodes ride through any W below 6 - 2 - 0.75 =
# 3.25 s, one round always and one split vote mostly; at 4 s the bound was 1.92 s, which one round whose
# timeout came up near 2T already misses (docs/ttl.md has the operator's version).
TTL_S = 6
ELECTION_TIMEOUT_S = 1.0
SETTLE_S = 1.0  # the nodes' --settle (its default)
# Between etcd having a leader again and a node's renewal confirmed by it: the other survivor learns the leader
# from its first heartbeat (0.1 s), a failed renewal is retried after 0.1 s (session.RETRY_AFTER_FAILURE_S), a
# follower's forward to the leader retries every 50 ms: 0.25 s; and on a loaded 2-core machine any of these
# threads, and the Status poll that measured W, may run a few hundred ms late: 0.5 s.
RIDE_THROUGH_MARGIN_S = 0.75
# After a longer window a node that gave its session up leaves its keys to expire, and the new raft leader has
# just refreshed every lease to TTL + T (etcd's lessor.Promote, so that no lease dies of the election itself);
# the expiry is noticed within 0.5 s (etcd's lessor checks twice a second); the next node in the shard's queue
# then waits out the settle window and readies the shard (its jobs, the missed slots) on a loaded machine.
RESUME_SLACK_S = 0.5 + 2.5


def ride_through_bound_s(ttl_s: float) -> float:
    """etcd leaderless for less than this: no node may lose its session."""
    return ttl_s - ttl_s / 3 - RIDE_THROUGH_MARGIN_S


def resume_bound_s(ttl_s: float) -> float:
    """etcd leaderless for longer: every shard must run a tick again within this of etcd's new leader."""
    return ttl_s + ELECTION_TIMEOUT_S + SETTLE_S + RESUME_SLACK_S


def test_etcd_leader_member_killed_scheduling_continues(fault_cluster, figures, monkeypatch):
    """Kill etcd's raft leader under a running cluster: measure how long etcd itself had no leader (W), then hold
    the nodes to what that allows. W < TTL - R - margin: no session lost, no shard stops for a TTL. Longer:
    shards may drop (no renewal could be confirmed for a TTL), but every shard runs again within
    ``resume_bound_s`` of etcd's new leader, and nothing runs twice or is missed."""
    ttl = TTL_S
    figures["scenario"] = "4. etcd member loss"
    for k, v in etcd_raft.ZAP_LOGGER_ENV.items():  # raft's lines to the millisecond
        monkeypatch.setenv(k, v)
    fc = fault_cluster(ttl=ttl)
    fc.start()
    before = fc.monitor.latest()
    poller = etcd_raft.StatusPoller(fc.etcd.members).start()
    try:
        leader_id, term = wait_until(poller.leader, 20, 0.1, "every etcd member to name one leader")
        ids = wait_until(
            lambda: _all_or_none(poller.member_ids(), len(fc.etcd.members)), 20, 0.1, "every etcd member's id"
        )
        leader = next(m for m in fc.etcd.members if ids[m.name] == leader_id)
        down_s = 2 * ttl + 2
        figures["fault"] = f"kill -9 the etcd leader member {leader.name} (term {term}) for {down_s} s, then restart it"

        # Counted from the kill: on a loaded 2-core machine, three etcd members and three nodes starting
        # together have made a node lose its session during start() (every endpoint timed out), which is
        # not what this scenario is about.
        lines_before = {n: _fault_lines(fc.log(n)) for n in fc.nodes}
        figures["session lost lines before the fault (start-up)"] = {
            n: c["session lost"] for n, c in lines_before.items()
        }
        t_kill = time.time()  # before the signal: W is never understated
        fc.etcd.kill(leader)
        again = wait_until(
            lambda: etcd_raft.leader_again(poller.since(t_kill), after=t_kill, deposed=leader_id),
            30,
            0.05,
            f"a new etcd leader among the {len(fc.etcd.members) - 1} members left",
        )
        t_leader = again.t
        sleep_until(t_kill + down_s)
        terms_seen = sorted({s.term for s in poller.since(t_kill) if s.term})
    finally:
        poller.stop()
    fc.etcd.start_member(leader, state="existing")
    t_restart = time.time()
    wait_until(
        lambda: fc.etcd_healthy() and fc.etcd_members_started() == 3,
        60,
        0.5,
        "the restarted member to rejoin: 3 healthy members",
    )
    figures["member healthy again after restart"] = f"{time.time() - t_restart:.2f} s"

    window = t_leader - t_kill
    names = {v: k for k, v in ids.items()}
    raft = etcd_raft.elections(
        [e for m in fc.etcd.members for e in etcd_raft.raft_events(_read(m.log_path))], t_kill, t_restart
    )
    logged = raft.first_elected()
    figures["etcd leaderless window"] = (
        f"{window:.2f} s by Status polls ({leader.name} -> {names.get(again.leader, hex(again.leader))}, term "
        f"{again.term}); raft's own line: "
        + (f"{logged - t_kill:.3f} s" if logged else "none logged")
        + ("" if raft.precise else " (whole-second stamps)")
    )
    figures["etcd elections"] = f"{raft.describe()}; terms reported by Status: {terms_seen}"
    rides = window < ride_through_bound_s(ttl)
    bound = f"TTL - R - margin = {ttl} - {ttl / 3:.2f} - {RIDE_THROUGH_MARGIN_S} = {ride_through_bound_s(ttl):.2f} s"
    split = f"split vote in terms {raft.split}, " if raft.split else ""

    t_settled = time.time() + 2 * ttl
    sleep_until(t_settled)  # leave the nodes two lease periods on the healed cluster to trip over anything

    v = fc.verify()
    during = {n: _fault_lines(fc.log(n)) - lines_before.get(n, Counter()) for n in fc.nodes}
    lost = {n: c["session lost"] for n, c in during.items()}
    dropped = {n: c["leader -> lost"] for n, c in during.items()}
    interrupted = {n: c["coordination interrupted"] for n, c in during.items()}
    changes = fc.monitor.changes(t_kill, t_settled)
    gaps = fc.monitor.gaps(t_kill, t_settled)
    after = fc.monitor.latest()
    service = fc.service_gaps(int(t_kill * 1000), int(t_settled * 1000))
    worst_shard = max(service, key=service.get)
    figures["leader changes per shard during the fault"] = changes or {}
    figures["failover measured"] = "none needed" if not changes else f"{len(changes)} shards moved"
    figures["session lost lines"] = lost
    figures["shards dropped by nodes (leader -> lost)"] = dropped
    figures["'coordination interrupted' lines"] = interrupted
    figures["longest service gap during the fault"] = f"{service[worst_shard] / 1000:.2f} s (shard {worst_shard})"
    figures["shards whose leader differs before/after"] = sum(before[k] != after.get(k) for k in before)

    problems = []
    if rides:
        figures["case"] = f"etcd re-elected in {window:.2f} s < {bound}: no session may be lost"
        figures["theoretical window"] = (
            f"etcd leaderless {window:.2f} s < {ride_through_bound_s(ttl):.2f} s: "
            f"no session lost; no shard without a tick for TTL = {ttl} s"
        )
        if any(lost.values()):
            problems.append(
                f"a node lost its session although etcd had a leader again {window:.2f} s after the "
                f"kill, within {bound}: {lost}"
            )
        if any(dropped.values()):
            problems.append(
                f"nodes dropped shards although no session could have lapsed: {dropped}, "
                f"'coordination interrupted' lines: {interrupted}"
            )
        if any(c > 1 for c in changes.values()):
            problems.append(f"a shard changed leader more than once: {changes}")
        if any(g >= ttl for g in gaps.values()):
            problems.append(f"a shard was leaderless for a TTL or more: {gaps}")
        # Ticks need only the database: with every session kept, no shard may stop running for a TTL.
        if service[worst_shard] >= ttl * 1000:
            problems.append(
                f"shard {worst_shard} ran no tick for {service[worst_shard] / 1000:.2f} s although etcd had a leader "
                f"again after {window:.2f} s (TTL {ttl} s); shards dropped per node (leader -> lost): {dropped}, "
                f"'coordination interrupted' lines: {interrupted}"
            )
    else:
        # No renewal could be confirmed for up to a TTL: dropping shards is right and safe (fencing), and etcd
        # cannot do better. What the product owes: every shard runs again soon after etcd has a leader again.
        first = fc.first_starts_after(int(t_leader * 1000), int(t_settled * 1000))
        late = {
            s: (None if at is None else round(at / 1000 - t_leader, 2))
            for s, at in first.items()
            if at is None or at / 1000 - t_leader > resume_bound_s(ttl)
        }
        resumed = max((at / 1000 - t_leader for at in first.values() if at is not None), default=0.0)
        figures["case"] = (
            f"{split}etcd leader after {window:.2f} s >= {bound}: shards may drop; every shard "
            f"ran again {resumed:.2f} s after etcd's new leader (bound {resume_bound_s(ttl):.1f} s)"
        )
        figures["theoretical window"] = (
            f"etcd leaderless {window:.2f} s >= {ride_through_bound_s(ttl):.2f} s: "
            f"every shard runs again ≤ TTL + T + settle + slack = "
            f"{resume_bound_s(ttl):.1f} s after etcd's new leader"
        )
        if late:
            problems.append(
                f"shards ran no tick within {resume_bound_s(ttl):.1f} s of etcd's new leader "
                f"(seconds after it; None: never by the end): {late}"
            )
    fc.assert_clean(v, problems)


def _all_or_none(ids: dict, count: int) -> dict | None:
    return ids if len(ids) == count else None


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _fault_lines(log_text: str) -> Counter:
    return Counter(
        {line: log_text.count(line) for line in ("session lost", "leader -> lost", "coordination interrupted")}
    )


def test_etcd_quorum_loss_stops_claims_then_every_missed_slot_runs_once(fault_cluster, figures):
    ttl = 4
    figures["scenario"] = "5. etcd quorum loss"
    fc = fault_cluster(ttl=ttl)
    fc.start()
    leader = fc.etcd_leader()
    victims = [leader] + [m for m in fc.etcd.members if m is not leader][:1]
    down_s = 2 * ttl
    figures["fault"] = f"kill -9 etcd members {[m.name for m in victims]} (leader first) for 2×TTL = {down_s} s"

    for m in victims:
        fc.etcd.kill(m)
    t_stop = time.time()

    # Every node stops leading: by its lease deadline ("session lost", within TTL of its last renewal),
    # or earlier, when an etcd call fails outright ("coordination interrupted").
    def stopped(n):
        log = fc.log(n)
        times = [
            (t, why)
            for why in ("session lost", "coordination interrupted")
            if (t := log.first(why, t_stop - 0.001)) is not None
        ]
        return min(times) if times else None

    wait_until(lambda: all(stopped(n) for n in fc.nodes), ttl + 10, 0.1, "every node to give its shards up")
    how = {n: stopped(n) for n in fc.nodes}
    figures["nodes gave their shards up after the quorum went"] = {
        n: f"{t - t_stop:.2f} s ({why})" for n, (t, why) in how.items()
    }
    late = {n: t - t_stop for n, (t, _) in how.items() if t - t_stop > ttl + 0.5}
    assert not late, f"nodes kept their shards past the TTL without a quorum: {late}"
    sleep_until(t_stop + down_s)
    for m in victims:
        fc.etcd.start_member(m, state="existing")
    t_back = time.time()
    wait_until(lambda: fc.etcd_healthy() and fc.etcd_members_started() == 3, 60, 0.5, "a healthy etcd again")
    figures["quorum back (3 healthy) after restart"] = f"{time.time() - t_back:.2f} s"
    t_led = fc.monitor.wait(
        lambda m: len(m) == fc.cluster.shards and all(m.values()), 4 * ttl + 60, "every shard led again"
    )
    figures["failover measured"] = f"{t_led - t_back:.2f} s from quorum back to every shard led"
    figures["theoretical window"] = (
        f"claims stop ≤ TTL = {ttl} s after the loss; leaders again ≤ TTL after "
        "quorum returns (old leases are renewed by the new raft leader, then expire)"
    )

    # No claim was made after the nodes' leases could have lapsed, until the quorum came back.
    quiet_from = int((t_stop + ttl + 0.25) * 1000)
    with fc.engine.connect() as c:
        during = c.execute(
            select(ticks.c.job_id, ticks.c.scheduled_at_ms, ticks.c.node_id, ticks.c.claimed_at_ms).where(
                ticks.c.claimed_at_ms > quiet_from, ticks.c.claimed_at_ms < int(t_back * 1000)
            )
        ).all()
    figures["claims during the outage (after TTL)"] = len(during)
    assert not during, f"ticks claimed while etcd had no quorum: {during[:5]}"

    v = fc.verify()
    with fc.engine.connect() as c:
        caught = c.execute(
            select(ticks.c.scheduled_at_ms, ticks.c.started_at_ms).where(
                ticks.c.scheduled_at_ms > quiet_from, ticks.c.scheduled_at_ms < int(t_back * 1000)
            )
        ).all()
    figures["slots of the outage caught up"] = len(caught)
    assert caught and all(s.started_at_ms >= t_back * 1000 for s in caught if s.started_at_ms), (
        "the outage's slots ran after the quorum came back"
    )
    fc.assert_clean(v)


# -- the pure parts of scenario 4 (no cluster) ----------------------------------------------------

_ZAP = '{{"level":"info","ts":"2026-12-05T14:11:{s}Z","caller":"raft/raft.go:1","msg":"{msg}"}}'
_SPLIT_LOG = "\n".join(
    [
        _ZAP.format(
            s="20.100",
            msg="a1 [logterm: 2, index: 9, vote: b2] ignored MsgVote from c3 [logterm: 2, index: 9] "
            "at term 2: lease is not expired (remaining ticks: 1)",
        ),
        _ZAP.format(s="20.000", msg="c3 became candidate at term 3"),
        _ZAP.format(s="20.900", msg="a1 became candidate at term 3"),
        _ZAP.format(s="20.901", msg="a1 received MsgVoteResp rejection from c3 at term 3"),
        _ZAP.format(s="21.800", msg="c3 became candidate at term 4"),
        _ZAP.format(s="21.801", msg="a1 received MsgVoteResp rejection from c3 at term 4"),
        _ZAP.format(s="22.950", msg="a1 became candidate at term 5"),
        _ZAP.format(s="22.952", msg="raft.node: a1 elected leader a1 at term 5"),
        _ZAP.format(s="22.953", msg="raft.node: c3 elected leader a1 at term 5"),
        '{"level":"warn","ts":"2026-12-05T14:11:21.000Z","msg":"rafthttp: lost the TCP streaming connection"}',
        "not a log line",
    ]
)
_T0 = 1796480000.0  # a kill time


@pytest.mark.parametrize(
    ("text", "kinds", "precise"),
    [
        (
            _SPLIT_LOG,
            [
                "vote ignored (in lease)",
                "campaign",
                "campaign",
                "vote rejected",
                "campaign",
                "vote rejected",
                "campaign",
                "elected",
                "elected",
            ],
            True,
        ),
        (
            "raft2026/12/05 14:11:05 INFO: 54ce became leader at term 4\n"
            "raft2026/12/05 14:11:05 INFO: raft.node: 54ce elected leader 54ce at term 4",
            ["elected"],
            False,
        ),
        ("2026-12-05 14:11:05.289069 W | rafthttp: health check for peer 198d could not connect", [], True),
    ],
)
def test_raft_events_reads_zap_and_capnslog_lines(text, kinds, precise):
    events = etcd_raft.raft_events(text)
    assert [e.kind for e in events] == kinds
    assert all(e.precise is precise for e in events)


def test_elections_name_the_split_votes_and_the_term_that_elected():
    events = etcd_raft.raft_events(_SPLIT_LOG)
    start = events[1].t - 0.5
    got = etcd_raft.elections(events, start, start + 10)
    assert (got.campaigned, got.split, got.ignored_votes, got.precise) == ([3, 4, 5], [3, 4], 1, True)
    assert round(got.first_elected() - start, 3) == 3.452
    assert "split/failed votes in terms [3, 4]" in got.describe()
    # a window that ends before the election: every campaign so far failed
    assert etcd_raft.elections(events, start, start + 2.5).split == [3, 4]


def test_leader_again_is_the_first_answer_naming_another_leader_after_the_kill():
    s = etcd_raft.StatusSample
    samples = [
        s(_T0 - 1, "m0", 1, 7, 2),  # before the kill: the old leader 7
        s(_T0 + 0.2, "m0", 1, 7, 2),  # still names the dead leader (election timeout not up)
        s(_T0 + 0.3, "m7", None, None, None),  # the dead member does not answer
        s(_T0 + 1.5, "m1", 2, 0, 3),  # campaigning: no leader
        s(_T0 + 2.6, "m1", 2, 1, 4),  # leader 1 at term 4
        s(_T0 + 2.5, "m0", 1, 1, 4),
    ]  # out of order: the earliest answer counts
    assert etcd_raft.leader_again(samples, after=_T0, deposed=7).t == _T0 + 2.5
    assert etcd_raft.leader_again(samples[:4], after=_T0, deposed=7) is None


@pytest.mark.parametrize(
    ("ttl", "rides_below", "resumes_within"),
    [
        (4, 1.92, 9.0),
        (6, 3.25, 11.0),
        (10, 5.92, 15.0),
        (15, 9.25, 20.0),
    ],
)
def test_scenario_4_bounds(ttl, rides_below, resumes_within):
    assert round(ride_through_bound_s(ttl), 2) == rides_below
    assert resume_bound_s(ttl) == resumes_within
