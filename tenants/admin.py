from django.contrib import admin
from django.http import HttpRequest

from core.admin import ReadOnlyAdmin
from tenants.models import AuditEvent, Membership, ServiceToken, Tenant, TenantQuota


class QuotaInline(admin.StackedInline):  # type: ignore[type-arg]
    model = TenantQuota
    can_delete = False


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("slug", "name", "active", "created_at")
    search_fields = ("slug", "name")
    inlines = [QuotaInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("user", "tenant", "role")
    list_filter = ("role", "tenant")


@admin.register(ServiceToken)
class ServiceTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("prefix", "name", "tenant", "role", "expires_at", "last_used_at", "revoked_at")
    list_filter = ("tenant", "role")
    # The digest is not a secret but has no use to a human; tokens are issued
    # through the console, API or `issue_token`, never typed in here.
    exclude = ("digest",)
    readonly_fields = ("prefix", "created_at", "created_by", "last_used_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("at", "tenant", "actor_label", "action", "object_type", "object_id", "outcome")
    list_filter = ("action", "outcome", "tenant")
    search_fields = ("actor_label", "object_id", "request_id")
