"""stored credentials, claimed code addresses, and the codes and links that arrive for them

Revision ID: 0022c
Revises: 0022s
Create Date: 2026-12-07 09:20:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0022c'
down_revision = '0022s'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'credentials',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('api_key_id', sa.Integer(), sa.ForeignKey('api_keys.id', ondelete='CASCADE'), nullable=False),
        sa.Column('name', sa.String(100), nullable=False),
        sa.Column('sites', sa.JSON(), nullable=False),
        sa.Column('fields', sa.JSON(), nullable=False),
        sa.Column('values_sealed', sa.Text(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.UniqueConstraint('api_key_id', 'name'),
    )
    op.create_table(
        'code_addresses',
        sa.Column('identifier', sa.String(320), primary_key=True),
        sa.Column('api_key_id', sa.Integer(), sa.ForeignKey('api_keys.id', ondelete='CASCADE'), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index('ix_code_addresses_api_key_id', 'code_addresses', ['api_key_id'])
    op.create_table(
        'code_messages',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('api_key_id', sa.Integer(), sa.ForeignKey('api_keys.id', ondelete='CASCADE'), nullable=False),
        sa.Column('identifier', sa.String(320), nullable=False),
        sa.Column('has_code', sa.Boolean(), nullable=False),
        sa.Column('has_link', sa.Boolean(), nullable=False),
        sa.Column('sealed', sa.Text(), nullable=False),
        sa.Column('source', sa.String(10), nullable=False),
        sa.Column('received_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index('ix_code_messages_key_identifier', 'code_messages', ['api_key_id', 'identifier', 'received_at'])


def downgrade():
    op.drop_table('code_messages')
    op.drop_table('code_addresses')
    op.drop_table('credentials')
