"""webhook deliveries: payloads (they carry the callbackSecret) sealed at rest

Revision ID: 0010
Revises: 0006
Create Date: 2026-11-24 13:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


revision = '0010'
down_revision = '0006'
branch_labels = None
depends_on = None

deliveries = sa.table('webhook_deliveries', sa.column('id', sa.String), sa.column('payload', sa.Text))


def upgrade():
    from app.crypto import seal_text

    conn = op.get_bind()
    for row_id, payload in conn.execute(sa.select(deliveries.c.id, deliveries.c.payload)
                                        .where(deliveries.c.payload.like('{%'))).all():
        conn.execute(deliveries.update().where(deliveries.c.id == row_id).values(payload=seal_text(payload)))


def downgrade():
    from app.crypto import unseal_text

    conn = op.get_bind()
    for row_id, payload in conn.execute(sa.select(deliveries.c.id, deliveries.c.payload)
                                        .where(sa.not_(deliveries.c.payload.like('{%')))).all():
        conn.execute(deliveries.update().where(deliveries.c.id == row_id).values(payload=unseal_text(payload)))
