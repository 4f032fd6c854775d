"""task proxy: a cloud_browser task's own proxy (server and credentials), Fernet-encrypted

Revision ID: 0020x
Revises: 0020p
Create Date: 2026-11-28 18:20:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0020x'
down_revision = '0020p'
branch_labels = None
depends_on = None


def upgrade():
    op.add_column('tasks', sa.Column('proxy_sealed', sa.Text(), nullable=True))


def downgrade():
    op.drop_column('tasks', 'proxy_sealed')
