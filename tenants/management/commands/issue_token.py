from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants import services
from tenants.exceptions import TenantsError
from tenants.models import Tenant
from tenants.roles import Role


class Command(BaseCommand):
    help = "Issue a service token; the token is printed alone on the last line (shown once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--role", required=True, choices=[r.label for r in Role])
        parser.add_argument("--name", required=True)

    def handle(self, *args: Any, **opts: Any) -> None:
        tenant = Tenant.objects.filter(slug=opts["slug"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {opts['slug']!r}")
        try:
            token, raw = services.token_issue(
                tenant=tenant, name=opts["name"], role=Role.parse(opts["role"])
            )
        except TenantsError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(
            f"issued {token.role} token {token.prefix}… ({token.name}) for {tenant.slug}; store it now:"
        )
        self.stdout.write(raw)
