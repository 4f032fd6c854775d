"""downloaded files: a file of the key can come from a task's or a kept session's browser (files.task_id, session_id)

Revision ID: 0019f
Revises: 0018l
Create Date: 2026-11-28 14:30:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0019f'
down_revision = '0018l'
branch_labels = None
depends_on = None


def upgrade():
    op.add_column('files', sa.Column('task_id', sa.String(length=36), nullable=True))
    op.add_column('files', sa.Column('session_id', sa.String(length=64), nullable=True))
    op.create_index('ix_files_task_id', 'files', ['task_id'])
    op.create_index('ix_files_key_created', 'files', ['api_key_id', 'created_at'])


def downgrade():
    op.drop_index('ix_files_key_created', table_name='files')
    op.drop_index('ix_files_task_id', table_name='files')
    op.drop_column('files', 'session_id')
    op.drop_column('files', 'task_id')
