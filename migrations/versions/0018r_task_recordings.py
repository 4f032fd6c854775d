"""task recordings: one rrweb recording (gzip-compressed JSON) per browser run

Revision ID: 0018r
Revises: 0017
Create Date: 2026-11-26 18:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0018r'
down_revision = '0018s'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'task_recordings',
        sa.Column('task_id', sa.String(length=36), nullable=False),
        sa.Column('data', sa.LargeBinary(), nullable=False),
        sa.Column('events', sa.Integer(), nullable=False),
        sa.Column('duration_ms', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.ForeignKeyConstraint(['task_id'], ['tasks.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('task_id'),
    )
    op.create_index('ix_task_recordings_created_at', 'task_recordings', ['created_at'])


def downgrade():
    op.drop_index('ix_task_recordings_created_at', table_name='task_recordings')
    op.drop_table('task_recordings')
