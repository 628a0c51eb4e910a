from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants import services
from tenants.exceptions import TenantsError


class Command(BaseCommand):
    help = "Create a tenant (with its default quota)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            tenant = services.tenant_create(slug=opts["slug"], name=opts["name"])
        except TenantsError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"created tenant {tenant.slug}")
