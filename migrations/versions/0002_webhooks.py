"""webhook deliveries: publish bookkeeping and an attempt lease

Revision ID: 0002_webhooks
Revises: 0001
Create Date: 2026-11-21 23:20:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0002_webhooks'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('webhook_deliveries', schema=None) as batch_op:
        batch_op.add_column(sa.Column('dispatched_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('lease_owner', sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True))


def downgrade():
    with op.batch_alter_table('webhook_deliveries', schema=None) as batch_op:
        batch_op.drop_column('lease_expires_at')
        batch_op.drop_column('lease_owner')
        batch_op.drop_column('dispatched_at')
