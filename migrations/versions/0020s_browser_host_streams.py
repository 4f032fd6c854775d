"""browser host streams: each browser-holding machine's stream endpoint URL, and a task's live state in its row

Revision ID: 0020s
Revises: 0020x
Create Date: 2026-11-28 18:20:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0020s'
down_revision = '0020x'
branch_labels = None
depends_on = None


def upgrade():
    op.add_column('session_hosts', sa.Column('url', sa.Text(), nullable=True))
    op.add_column('tasks', sa.Column('live', sa.JSON(), nullable=True))


def downgrade():
    op.drop_column('tasks', 'live')
    op.drop_column('session_hosts', 'url')
