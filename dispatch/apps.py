from django.apps import AppConfig
from django.core import checks


class DispatchConfig(AppConfig):
    name = "dispatch"
    verbose_name = "Schedules and executions"

    def ready(self) -> None:
        from dispatch.checks import check_platform_url

        checks.register(check_platform_url, checks.Tags.security, deploy=True)
