"""schema check: the worker's check of a task's answer against its responseFormat, stored for the console

Revision ID: 0018s
Revises: 0017
Create Date: 2026-11-26 18:20:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0018s'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade():
    op.add_column('tasks', sa.Column('schema_check', sa.JSON(), nullable=True))


def downgrade():
    op.drop_column('tasks', 'schema_check')
