"""attachments and MCP servers: sealed MCP credentials per task, files by age for the expiry sweep

Revision ID: 0006
Revises: 0002_webhooks
Create Date: 2026-11-23 23:15:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0002_webhooks'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('tasks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('mcp_sealed', sa.Text(), nullable=True))
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.create_index('ix_files_created_at', ['created_at'], unique=False)


def downgrade():
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.drop_index('ix_files_created_at')
    with op.batch_alter_table('tasks', schema=None) as batch_op:
        batch_op.drop_column('mcp_sealed')
