"""session hosts: each machine holding kept browsers says it is alive; a session whose machine went quiet ends with a message

Revision ID: 0019v
Revises: 0019p
Create Date: 2026-11-28 14:30:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0019v'
down_revision = '0019p'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'session_hosts',
        sa.Column('host', sa.String(length=200), nullable=False),
        sa.Column('seen_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint('host'),
    )
    op.add_column('cloud_sessions', sa.Column('end_message', sa.Text(), nullable=True))


def downgrade():
    op.drop_column('cloud_sessions', 'end_message')
    op.drop_table('session_hosts')
