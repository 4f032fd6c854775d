"""a pause keeps the browser: the pause's sealed snapshot of the browser's state, and the node that keeps the browser

Revision ID: 0019p
Revises: 0019f
Create Date: 2026-11-28 14:40:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0019p'
down_revision = '0019f'
branch_labels = None
depends_on = None


def upgrade():
    op.add_column('tasks', sa.Column('pause_snapshot', sa.Text(), nullable=True))
    op.add_column('tasks', sa.Column('browser_node', sa.String(length=200), nullable=True))


def downgrade():
    op.drop_column('tasks', 'browser_node')
    op.drop_column('tasks', 'pause_snapshot')
