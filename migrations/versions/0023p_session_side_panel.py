"""session side panel: a session made by the SDK's CloudBrowserEnvironment (require_extension) shows its Playwright a
stand-in Narada side panel, whose reload cancels the session's tasks (app/sessions/cdp_side_panel.py)

Revision ID: 0023p
Revises: 0023b
Create Date: 2026-12-07 13:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0023p'
down_revision = '0023b'
branch_labels = None
depends_on = None


def upgrade():
    op.add_column('cloud_sessions', sa.Column('side_panel', sa.Boolean(), nullable=False, server_default='0'))


def downgrade():
    op.drop_column('cloud_sessions', 'side_panel')
