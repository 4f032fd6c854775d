"""session browser settings: the identity a kept session's browser was started with (browserSettings)

Revision ID: 0023b
Revises: 0023w
Create Date: 2026-12-09 10:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0023b'
down_revision = '0023w'
branch_labels = None
depends_on = None


def upgrade():
    op.add_column('cloud_sessions', sa.Column('browser_settings', sa.JSON(), nullable=True))


def downgrade():
    op.drop_column('cloud_sessions', 'browser_settings')
