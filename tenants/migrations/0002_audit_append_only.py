"""Make the audit log append-only at the database: UPDATE and DELETE raise."""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION tenants_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'tenants_auditevent is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER tenants_auditevent_append_only
    BEFORE UPDATE OR DELETE ON tenants_auditevent
    FOR EACH ROW EXECUTE FUNCTION tenants_audit_append_only();
-- TRUNCATE stays possible for the table owner (test flushes, a deliberate
-- operator purge); production grants the application role no TRUNCATE.
"""

REVERSE = """
DROP TRIGGER IF EXISTS tenants_auditevent_append_only ON tenants_auditevent;
DROP FUNCTION IF EXISTS tenants_audit_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("tenants", "0001_initial")]
    operations = [migrations.RunSQL(FORWARD, REVERSE)]
