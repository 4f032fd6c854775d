"""task takeover: a person's control of a running browser task (live view), which the agent loop reads between steps

Revision ID: 0018l
Revises: 0017
Create Date: 2026-11-26 18:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0018l'
down_revision = '0018r'
branch_labels = None
depends_on = None


def upgrade():
    op.add_column('tasks', sa.Column('takeover', sa.JSON(), nullable=True))


def downgrade():
    op.drop_column('tasks', 'takeover')
