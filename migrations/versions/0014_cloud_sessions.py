"""cloud browser sessions: a kept server-side browser per row, and the session a task runs in

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24 12:50:00.000000

"""
from alembic import op
import sqlalchemy as sa



revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'cloud_sessions',
        sa.Column('id', sa.String(length=64), nullable=False),
        sa.Column('api_key_id', sa.Integer(), nullable=False),
        sa.Column('browser_window_id', sa.String(length=64), nullable=False),
        sa.Column('name', sa.String(length=200), nullable=True),
        sa.Column('timeout_seconds', sa.Integer(), nullable=False),
        sa.Column('status', sa.String(length=20), nullable=False),
        sa.Column('webdriver_url', sa.Text(), nullable=True),
        sa.Column('webdriver_session', sa.String(length=200), nullable=True),
        sa.Column('debugger_address', sa.String(length=200), nullable=True),
        sa.Column('host', sa.String(length=200), nullable=True),
        sa.Column('pid', sa.Integer(), nullable=True),
        sa.Column('profile_dir', sa.Text(), nullable=True),
        sa.Column('cdp_token_sealed', sa.Text(), nullable=True),
        sa.Column('cdp_url', sa.Text(), nullable=True),
        sa.Column('cdp_proxy_pid', sa.Integer(), nullable=True),
        sa.Column('busy_task_id', sa.String(length=36), nullable=True),
        sa.Column('end_reason', sa.String(length=40), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column('last_used_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['api_key_id'], ['api_keys.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['browser_window_id'], ['browser_windows.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_cloud_sessions_api_key_id', 'cloud_sessions', ['api_key_id'], unique=False)
    op.create_index('ix_cloud_sessions_status', 'cloud_sessions', ['status', 'last_used_at'], unique=False)
    op.create_index('ix_cloud_sessions_window', 'cloud_sessions', ['browser_window_id'], unique=True)
    with op.batch_alter_table('tasks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('cloud_session_id', sa.String(length=64), nullable=True))


def downgrade():
    with op.batch_alter_table('tasks', schema=None) as batch_op:
        batch_op.drop_column('cloud_session_id')
    op.drop_index('ix_cloud_sessions_window', table_name='cloud_sessions')
    op.drop_index('ix_cloud_sessions_status', table_name='cloud_sessions')
    op.drop_index('ix_cloud_sessions_api_key_id', table_name='cloud_sessions')
    op.drop_table('cloud_sessions')
