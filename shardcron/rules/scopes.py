"""Who may do what: roles, the role every call needs, scoped tokens, and the one check.

Roles are ordered ``read < write < admin``; each includes the ones below it:

- ``read``: get, list, ticks, watch (and backfills, calendars and the shard map, read-only);
- ``write``: also put, delete, pause, resume, trigger, backfill;
- ``admin``: also namespaces, calendars, tokens, drain, reshard.

A token holds ONE role over a set of namespaces (``*``: every namespace, present
and future). Where a call acts decides what it is checked against (``Reach``):

- ``NAMESPACE``: on the jobs of the one namespace the request names: the token
  needs the role there. A read may name ``*`` (every namespace: ListJobs,
  ListBackfills, WatchTicks of all jobs); it is let through for any token with the
  role, and the server then shows only what ``may_read`` allows;
- ``ANY``: on cluster-wide data every tenant reads (calendars its jobs follow,
  the shard map): the role in any one namespace is enough;
- ``CLUSTER``: on what every namespace shares (calendars, namespaces, tokens,
  nodes, the shard count): only a token whose namespaces are ``*``. A team's
  admin can change neither another team's calendar nor its own rights.

``authorize(token, call, namespace)`` is None when allowed, else ``Denied`` whose
reason names the call, the namespace and the role it needs: the text the API sends
with PERMISSION_DENIED. An unknown call is denied (fail closed), and a test fails
when an RPC of ``protos/shardcron/v1/scheduler.proto`` is missing from ``CALLS``.

Forwarding: the node that forwards a call passes the caller's token on, and the
leader checks ``forwarded_identity(caller, forwarder)``: the caller's name with the
intersection of both scopes. It is never wider than the caller's own scope, and a
call that reaches a node without a caller's token gets no rights at all: a
node's own token never stands in for a caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

from shardcron.spec.namespaces import InvalidNamespace, validate_namespace

ALL_NAMESPACES = "*"  # in a token: every namespace; in a read request: every namespace the token may read


class Role(IntEnum):
    READ = 1
    WRITE = 2
    ADMIN = 3

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Role:
        """``read``, ``write`` or ``admin`` (any case); ValueError naming the choices otherwise."""
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"role {text!r} is not one of {', '.join(str(r) for r in cls)}") from None


class Reach(Enum):
    NAMESPACE = "namespace"  # the jobs of the namespace the request names
    ANY = "any"  # cluster-wide data every tenant may see with the role in any namespace
    CLUSTER = "cluster"  # what all namespaces share: needs the role on '*'


@dataclass(frozen=True)
class Rule:
    role: Role
    reach: Reach
    planned: bool = False  # not an RPC yet (issue 15 adds it); the test checks the flag against the proto


_R, _W, _A = Role.READ, Role.WRITE, Role.ADMIN
_NS, _ANY, _CLUSTER = Reach.NAMESPACE, Reach.ANY, Reach.CLUSTER

# Every RPC of the Scheduler service, and the ones issue 15 will add (planned).
CALLS: dict[str, Rule] = {
    # read
    "GetJob": Rule(_R, _NS),
    "ListJobs": Rule(_R, _NS),
    "ListTicks": Rule(_R, _NS),
    "ListDeadlineMisses": Rule(_R, _NS),
    "WatchTicks": Rule(_R, _NS),
    "GetBackfill": Rule(_R, _NS),
    "ListBackfills": Rule(_R, _NS),
    "GetShards": Rule(_R, _ANY),  # nodes, leaders and job counts: no tenant's data
    "GetCalendar": Rule(_R, _ANY),  # the calendars a tenant's jobs follow; the server lists only visible jobs
    "ListCalendars": Rule(_R, _ANY),
    # write
    "PutJob": Rule(_W, _NS),
    "PutJobs": Rule(_W, _NS),
    # Member nodes only (api/put_each.py): each PutJob it carries is checked as PutJob in its own namespace.
    "PutJobEach": Rule(_W, _ANY),
    "DeleteJob": Rule(_W, _NS),
    "PauseJob": Rule(_W, _NS),
    "ResumeJob": Rule(_W, _NS),
    "TriggerJob": Rule(_W, _NS),
    "AckTick": Rule(_W, _NS),
    "BackfillJob": Rule(_W, _NS),
    # admin: calendars are followed by every namespace's jobs, so changing one is cluster-wide
    "PutCalendar": Rule(_A, _CLUSTER),
    "DeleteCalendar": Rule(_A, _CLUSTER),
    "ListNamespaces": Rule(_A, _ANY),  # the server lists only the token's namespaces
    "GetNamespace": Rule(_A, _NS),
    "CreateNamespace": Rule(_A, _CLUSTER),
    "UpdateNamespace": Rule(_A, _CLUSTER),  # weights and quotas are the cluster's to share out
    "DeleteNamespace": Rule(_A, _CLUSTER),
    "ListTokens": Rule(_A, _CLUSTER),
    "CreateToken": Rule(_A, _CLUSTER),  # a token could grant what its creator lacks
    "RevokeToken": Rule(_A, _CLUSTER),
    "Drain": Rule(_A, _CLUSTER, planned=True),
    "Reshard": Rule(_A, _CLUSTER, planned=True),
}

# Every `shardcron` action that goes (or, for issue 15, will go) through the API, and the calls it makes.
CLI_ACTIONS: dict[str, tuple[str, ...]] = {
    "jobs get": ("GetJob",),
    "jobs list": ("ListJobs",),
    "ticks": ("ListTicks",),
    "jobs put": ("PutJob",),
    "jobs apply": ("PutJobs", "ListJobs", "DeleteJob"),  # --dry-run and --prune list; --prune deletes
    "jobs diff": ("ListJobs",),
    "jobs delete": ("DeleteJob",),
    "jobs pause": ("PauseJob",),
    "jobs resume": ("ResumeJob",),
    "jobs trigger": ("TriggerJob",),
    "jobs ack": ("AckTick",),
    "jobs backfill": ("BackfillJob",),
    "jobs backfills": ("ListBackfills", "GetBackfill"),
    "calendars get": ("GetCalendar",),
    "calendars list": ("ListCalendars",),
    "calendars put": ("PutCalendar",),
    "calendars delete": ("DeleteCalendar",),
    "namespaces list": ("ListNamespaces",),
    "namespaces describe": ("GetNamespace",),
    "namespaces create": ("CreateNamespace",),
    "namespaces update": ("UpdateNamespace",),
    "namespaces delete": ("DeleteNamespace",),
    "tokens list": ("ListTokens",),
    "tokens create": ("CreateToken",),
    "tokens revoke": ("RevokeToken",),
    "drain": ("Drain",),
    "reshard": ("Reshard",),  # etcd-direct today; through the API once tokens have roles
}

# The commands that reach etcd or the store directly, with their own credentials, or nothing of the cluster at
# all (``import`` reads a crontab, manifests, an app or a job store and writes a file): no API token applies.
LOCAL_COMMANDS: frozenset[str] = frozenset(
    {
        "node",
        "shards",
        "nodes",
        "fences",
        "config",
        "audit",
        "db upgrade",
        "db current",
        "db prune",
        "bench",
        "dev",
        "import crontab",
        "import k8s-cronjob",
        "import celery-beat",
        "import apscheduler",
    }
)


@dataclass(frozen=True)
class Token:
    """A caller's identity: its name (for the audit log), the hash of its secret, its role and namespaces."""

    name: str
    secret_hash: str
    role: Role
    namespaces: frozenset[str]  # may hold ALL_NAMESPACES

    @property
    def everywhere(self) -> bool:
        return ALL_NAMESPACES in self.namespaces

    def covers(self, namespace: str) -> bool:
        return self.everywhere or namespace in self.namespaces

    def describe(self) -> str:
        where = (
            "every namespace"
            if self.everywhere
            else ("namespaces " + ", ".join(sorted(self.namespaces)) if self.namespaces else "no namespace")
        )
        return f"token {self.name!r} has role {self.role} on {where}"


@dataclass(frozen=True)
class Denied:
    """Why a call is refused: ``reason`` is what the API sends with PERMISSION_DENIED."""

    reason: str
    role_needed: Role
    namespace: str | None


def authorize(token: Token, call: str, namespace: str | None) -> Denied | None:
    """None when ``token`` may make ``call`` in ``namespace``, else ``Denied`` naming what is missing.

    ``namespace``: the one the request names (the caller has already put ``default``
    in for none); ``*`` for a read of every namespace; ignored for ANY and CLUSTER calls.
    """
    rule = CALLS.get(call)
    if rule is None:
        return Denied(f"{call} is not a call this server knows a role for; refused", Role.ADMIN, namespace)
    if rule.reach is Reach.CLUSTER:
        if token.role >= rule.role and token.everywhere:
            return None
        return Denied(
            f"{call} acts on the whole cluster: it needs role {rule.role} on every namespace ('*'); {token.describe()}",
            rule.role,
            None,
        )
    if rule.reach is Reach.ANY:
        if token.role >= rule.role and token.namespaces:
            return None
        return Denied(f"{call} needs role {rule.role} in at least one namespace; {token.describe()}", rule.role, None)
    if namespace == ALL_NAMESPACES:
        if rule.role > Role.READ:  # a write acts on named jobs, never on "all of them"
            return Denied(f"{call} needs role {rule.role} in one named namespace, not '*'", rule.role, namespace)
        if token.role >= rule.role and token.namespaces:
            return None  # the server shows only what may_read allows
        return Denied(
            f"{call} in every namespace needs role {rule.role} in at least one; {token.describe()}",
            rule.role,
            namespace,
        )
    if token.role >= rule.role and namespace is not None and token.covers(namespace):
        return None
    return Denied(
        f"{call} in namespace {namespace!r} needs role {rule.role} there; {token.describe()}", rule.role, namespace
    )


def may_read(token: Token, namespace: str) -> bool:
    """Whether ``token`` may see the jobs, ticks and backfills of ``namespace`` (filters lists and watches)."""
    return token.covers(namespace)  # every role includes read


def forwarded_identity(caller: Token | None, forwarder: Token | None) -> Token:
    """The identity a leader checks for a call another node forwarded: never wider than the caller's.

    ``caller``: the token the call arrived with at the first node, as the leader
    identifies it from the bearer secret passed on (None: none was passed on, or
    the leader does not know it). A node cannot claim a scope for its caller: it
    can only pass on a secret, which the leader looks up in its own tokens.
    ``forwarder``: the forwarding node's own token (None: the node has none, which
    restricts nothing). The result keeps the caller's name, for the audit log.
    A cluster without a token file checks nothing, so this is never asked there.
    """
    if caller is None:
        return Token("(no token)", "", Role.READ, frozenset())
    if forwarder is None:
        return caller
    return Token(
        caller.name,
        caller.secret_hash,
        min(caller.role, forwarder.role),
        _intersect(caller.namespaces, forwarder.namespaces),
    )


def grant_refused(new: Token, creator: Token | None) -> str | None:
    """Why ``creator`` may not grant ``new`` (None: it may). CreateToken needs admin on '*', which covers
    everything; this keeps the rule true should that change."""
    if creator is None:
        return None
    if new.role > creator.role:
        return f"a token cannot grant role {new.role}: {creator.describe()}"
    if not creator.everywhere and (new.everywhere or not new.namespaces <= creator.namespaces):
        return f"a token cannot grant namespaces it lacks: {creator.describe()}"
    return None


def _intersect(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
    if ALL_NAMESPACES in a:
        return b
    if ALL_NAMESPACES in b:
        return a
    return a & b


def parse_namespaces(text: str, field: str = "namespaces") -> frozenset[str]:
    """A comma-separated list of namespace names, or ``*`` alone; ``InvalidNamespace`` saying what is wrong."""
    names = [n.strip() for n in text.split(",")]
    if any(not n for n in names):
        raise InvalidNamespace(field, f"{text!r} holds an empty name (a doubled or trailing comma?)")
    if ALL_NAMESPACES in names:
        if len(names) > 1:
            raise InvalidNamespace(field, f"{text!r}: '*' already means every namespace; give it alone")
        return frozenset(names)
    return frozenset(validate_namespace(n, field) for n in names)


__all__ = [
    "ALL_NAMESPACES",
    "CALLS",
    "CLI_ACTIONS",
    "LOCAL_COMMANDS",
    "Denied",
    "Reach",
    "Role",
    "Rule",
    "Token",
    "authorize",
    "forwarded_identity",
    "may_read",
    "parse_namespaces",
]
