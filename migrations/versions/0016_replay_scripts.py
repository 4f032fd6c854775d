"""replay scripts: the script of each successful web run, saved scripts and their versions

Revision ID: 0016
Revises: 0014
Create Date: 2026-11-25 14:50:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0016'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade():
    op.add_column('tasks', sa.Column('script', sa.JSON(), nullable=True))
    op.create_table(
        'scripts',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('api_key_id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=200), nullable=False),
        sa.Column('parameters', sa.JSON(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(['api_key_id'], ['api_keys.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_scripts_api_key_id', 'scripts', ['api_key_id'])
    op.create_table(
        'script_versions',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('script_id', sa.String(length=36), nullable=False),
        sa.Column('version', sa.Integer(), nullable=False),
        sa.Column('body', sa.JSON(), nullable=False),
        sa.Column('task_id', sa.String(length=36), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(['script_id'], ['scripts.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('script_id', 'version'),
    )


def downgrade():
    op.drop_table('script_versions')
    op.drop_index('ix_scripts_api_key_id', table_name='scripts')
    op.drop_table('scripts')
    op.drop_column('tasks', 'script')
