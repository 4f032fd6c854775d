"""schedules: tasks beat submits on a cron expression; a task's schedule and fire time, unique together

Revision ID: 0022s
Revises: 0021e
Create Date: 2026-12-07 09:20:00.000000

"""
from alembic import op
import sqlalchemy as sa

UtcDateTime = sa.DateTime(timezone=True)


revision = '0022s'
down_revision = '0021e'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'schedules',
        sa.Column('id', sa.String(36), primary_key=True),
        sa.Column('api_key_id', sa.Integer, sa.ForeignKey('api_keys.id', ondelete='CASCADE'), nullable=False),
        sa.Column('name', sa.String(200), nullable=False),
        sa.Column('cron', sa.String(200), nullable=False),
        sa.Column('time_zone', sa.String(64), nullable=False),
        sa.Column('task_sealed', sa.Text, nullable=False),
        sa.Column('overlap', sa.String(10), nullable=False),
        sa.Column('catch_up', sa.String(10), nullable=False),
        sa.Column('status', sa.String(10), nullable=False),
        sa.Column('paused_reason', sa.Text),
        sa.Column('next_fire_at', UtcDateTime),
        sa.Column('queued_fire_at', UtcDateTime),
        sa.Column('failures_in_row', sa.Integer, nullable=False, server_default='0'),
        sa.Column('last_fire_at', UtcDateTime),
        sa.Column('last_skip', sa.Text),
        sa.Column('created_at', UtcDateTime, server_default=sa.func.now(), nullable=False),
        sa.Column('updated_at', UtcDateTime, server_default=sa.func.now()),
    )
    op.create_index('ix_schedules_api_key_id', 'schedules', ['api_key_id'])
    op.create_index('ix_schedules_due', 'schedules', ['status', 'next_fire_at'])
    with op.batch_alter_table('tasks', schema=None) as batch_op:  # SQLite (embedded) adds a constraint by copy
        batch_op.add_column(sa.Column('schedule_id', sa.String(36), nullable=True))
        batch_op.add_column(sa.Column('fire_at', UtcDateTime, nullable=True))
        batch_op.create_unique_constraint('uq_tasks_schedule_fire', ['schedule_id', 'fire_at'])


def downgrade():
    with op.batch_alter_table('tasks', schema=None) as batch_op:
        batch_op.drop_constraint('uq_tasks_schedule_fire', type_='unique')
        batch_op.drop_column('fire_at')
        batch_op.drop_column('schedule_id')
    op.drop_index('ix_schedules_due', 'schedules')
    op.drop_index('ix_schedules_api_key_id', 'schedules')
    op.drop_table('schedules')
