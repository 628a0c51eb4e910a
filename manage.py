#!/usr/bin/env python
"""Django's command-line utility. With no DATABASE_URL / CELERY_BROKER_URL set,
the embedded PostgreSQL and Redis are started first (see config/embedded.py)."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from config import embedded

    embedded.ensure_started()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
