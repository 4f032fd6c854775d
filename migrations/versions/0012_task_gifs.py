"""task GIF recordings (generateGif): one animated GIF per task

Revision ID: 0012
Revises: 0010
Create Date: 2026-11-24 13:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0012'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'task_gifs',
        sa.Column('task_id', sa.String(length=36), nullable=False),
        sa.Column('data', sa.LargeBinary(), nullable=False),
        sa.Column('frames', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.ForeignKeyConstraint(['task_id'], ['tasks.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('task_id'),
    )


def downgrade():
    op.drop_table('task_gifs')
