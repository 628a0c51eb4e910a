#!/usr/bin/env python
"""Django's command-line utility. With no DATABASE_URL / CELERY_BROKER_URL set,
commands that use the database or the broker join the embedded PostgreSQL and
Redis (config/embedded.py), starting them if needed and stopping what they
started when the last user leaves; `help`, `check` and the like start nothing."""

import os
import sys

# Commands that touch neither the database nor the broker.
NO_SERVERS = {
    "help",
    "version",
    "check",
    "collectstatic",
    "findstatic",
    "diffsettings",
    "startapp",
    "startproject",
    "makemessages",
    "compilemessages",
}


def needs_servers(argv: list[str]) -> bool:
    args = argv[1:]
    if not args or args[0] in {"-h", "--help", "--version"} or "-h" in args or "--help" in args:
        return False
    # `check --database default` runs the database checks.
    if args[0] == "check":
        return any(a == "--database" or a.startswith("--database=") for a in args)
    return args[0] not in NO_SERVERS


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    if needs_servers(sys.argv):
        from config import embedded

        embedded.acquire()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
