"""``shardcron tokens create NAME --role R --namespaces a,b|* | list | revoke NAME``: scoped API tokens.

The tokens live in the store (``api_tokens``), next to each node's token file;
only the hash of a secret is kept, so ``create`` prints the secret this once.
Every call here needs a token with role admin on ``*``.
"""

from __future__ import annotations

import argparse

from shardcron.cli.common import add_api_flags, api_client, fmt_ms, print_json, table

HEADERS = ["NAME", "ROLE", "NAMESPACES", "SOURCE", "CREATED", "CREATED BY"]


def _json(t) -> dict:
    return {
        "name": t.name,
        "role": t.role,
        "namespaces": list(t.namespaces),
        "source": t.source,
        "created_at_ms": t.created_at_ms,
        "created_by": t.created_by,
    }


def cmd_create(a: argparse.Namespace) -> int:
    with api_client(a) as c:
        token, secret = c.create_token(a.name, a.role, [n.strip() for n in a.namespaces.split(",")])
    if a.json:
        print_json({**_json(token), "secret": secret})
        return 0
    print(f"token {token.name}: role {token.role} on {','.join(token.namespaces)}")
    print(f"secret: {secret}")
    print(
        "Keep the secret now: it cannot be shown again (only its hash is stored). Pass it with --token or "
        "SHARDCRON_TOKEN."
    )
    return 0


def cmd_list(a: argparse.Namespace) -> int:
    with api_client(a) as c:
        tokens = c.list_tokens()
    if a.json:
        print_json([_json(t) for t in tokens])
        return 0
    print(
        table(
            [
                [
                    t.name,
                    t.role,
                    ",".join(t.namespaces),
                    t.source,
                    fmt_ms(t.created_at_ms) if t.created_at_ms else "-",
                    t.created_by or "-",
                ]
                for t in tokens
            ],
            HEADERS,
        )
    )
    return 0


def cmd_revoke(a: argparse.Namespace) -> int:
    with api_client(a) as c:
        c.revoke_token(a.name)
    if a.json:
        print_json({"name": a.name, "revoked": True})
    else:
        print(f"token {a.name} revoked: every node refuses it, and ends its open streams, within 2 seconds")
    return 0


def register(subparsers) -> None:
    tokens = subparsers.add_parser("tokens", help="scoped API tokens: create, list, revoke (admin on '*')")
    sub = tokens.add_subparsers(dest="tokens_command", metavar="COMMAND")
    sub.required = True

    create = sub.add_parser("create", help="create a token; prints its secret once")
    create.add_argument("name", metavar="NAME")
    create.add_argument(
        "--role",
        required=True,
        choices=["read", "write", "admin"],
        help="read < write < admin; each includes the ones below",
    )
    create.add_argument(
        "--namespaces",
        required=True,
        metavar="a,b|*",
        help="the namespaces it acts in, comma-separated, or '*' for every namespace",
    )
    create.set_defaults(func=cmd_create)

    ls = sub.add_parser("list", help="list the tokens: the nodes' token file's and the store's")
    ls.set_defaults(func=cmd_list)

    revoke = sub.add_parser("revoke", help="revoke a token created with `tokens create`")
    revoke.add_argument("name", metavar="NAME")
    revoke.set_defaults(func=cmd_revoke)
    for p in (create, ls, revoke):
        add_api_flags(p)
