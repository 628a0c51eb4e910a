from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants, roles, tokens and audit"

    def ready(self) -> None:
        from django.core import checks

        from tenants import limits

        checks.register(limits.check_settings)
