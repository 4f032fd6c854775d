"""session egress host: the machine whose worker runs a kept session's egress proxy (a Grid session's too)

Revision ID: 0021e
Revises: 0020s
Create Date: 2026-11-28 22:20:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0021e'
down_revision = '0020s'
branch_labels = None
depends_on = None


def upgrade():
    op.add_column('cloud_sessions', sa.Column('egress_host', sa.String(200), nullable=True))
    op.execute("UPDATE cloud_sessions SET egress_host = host WHERE host IS NOT NULL AND host <> 'grid'")


def downgrade():
    op.drop_column('cloud_sessions', 'egress_host')
