"""Project wiring: settings, urls, the Celery app, telemetry and secrets backends."""

from typing import Any


def __getattr__(name: str) -> Any:
    # `celery -A config worker` looks up `config.app`; importing it lazily keeps
    # `import config.settings` free of Celery start-up work.
    if name in {"app", "celery"}:
        from config.celery_app import app

        return app
    raise AttributeError(name)
