"""API tokens created through the API: name, the hash of the secret, role and namespaces.

Revision ID: 0008
Revises: 0007

Only the SHA-256 of a secret is stored (api.tokens); the secret is shown once,
by CreateToken. A node's token file adds its own tokens to these.

Written by hand against shardcron/store/schema.py; tests compare the two.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from shardcron.store.migrations.revision_types import TABLE_OPTIONS, exact

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("name", exact(64), nullable=False),
        sa.Column("secret_hash", exact(71), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("namespaces", sa.Text(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("created_by", exact(64), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_api_tokens"),
        sa.UniqueConstraint("secret_hash", name="uq_api_tokens_secret_hash"),
        **TABLE_OPTIONS,
    )


def downgrade() -> None:
    op.drop_table("api_tokens")
