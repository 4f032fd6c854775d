"""task wait_sealed: what a run paused for a one-time code or sign-in link takes up when it arrives, Fernet-encrypted

Revision ID: 0023w
Revises: 0022c
Create Date: 2026-12-09 10:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0023w'
down_revision = '0022c'
branch_labels = None
depends_on = None


def upgrade():
    op.add_column('tasks', sa.Column('wait_sealed', sa.Text(), nullable=True))


def downgrade():
    op.drop_column('tasks', 'wait_sealed')
