"""console sessions: a row per console sign-in, deleted at sign-out (the cookie alone no longer signs in)

Revision ID: 0017
Revises: 0014
Create Date: 2026-11-25 14:30:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'console_sessions',
        sa.Column('id', sa.String(length=64), nullable=False),
        sa.Column('api_key_id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(['api_key_id'], ['api_keys.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_console_sessions_api_key_id', 'console_sessions', ['api_key_id'])


def downgrade():
    op.drop_index('ix_console_sessions_api_key_id', table_name='console_sessions')
    op.drop_table('console_sessions')
