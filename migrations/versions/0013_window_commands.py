"""window commands: what the worker or an extension action asks a browser window to do, and its result

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24 12:40:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'window_commands',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('window_id', sa.String(length=64), nullable=False),
        sa.Column('task_id', sa.String(length=36), nullable=True),
        sa.Column('action_execution_id', sa.String(length=200), nullable=True),
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('args', sa.JSON(), nullable=False),
        sa.Column('state', sa.String(length=20), nullable=False, server_default='pending'),
        sa.Column('result', sa.JSON(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('completed_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['window_id'], ['browser_windows.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_window_commands_window_state', 'window_commands', ['window_id', 'state', 'created_at'])
    with op.batch_alter_table('browser_windows', schema=None) as batch_op:
        batch_op.add_column(sa.Column('user_agent', sa.String(length=300), nullable=True))


def downgrade():
    with op.batch_alter_table('browser_windows', schema=None) as batch_op:
        batch_op.drop_column('user_agent')
    op.drop_index('ix_window_commands_window_state', table_name='window_commands')
    op.drop_table('window_commands')
