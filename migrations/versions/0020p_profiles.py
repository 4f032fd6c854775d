"""profiles: named browser profiles per API key (sealed cookies and localStorage), one writer at a time

Revision ID: 0020p
Revises: 0019v
Create Date: 2026-11-28 18:30:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0020p'
down_revision = '0019v'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'profiles',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('api_key_id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=100), nullable=False),
        sa.Column('state_sealed', sa.Text(), nullable=True),
        sa.Column('size_bytes', sa.Integer(), nullable=False),
        sa.Column('writer', sa.String(length=64), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column('last_used_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(['api_key_id'], ['api_keys.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('api_key_id', 'name'),
    )
    op.create_index('ix_profiles_last_used_at', 'profiles', ['last_used_at'])


def downgrade():
    op.drop_index('ix_profiles_last_used_at', table_name='profiles')
    op.drop_table('profiles')
