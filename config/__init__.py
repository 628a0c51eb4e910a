"""Project wiring: settings, urls, the Celery app, telemetry and secrets backends."""

import sys
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parent.parent)


def __getattr__(name: str) -> Any:
    # `celery -A config worker` looks up `config.app`; importing it lazily keeps
    # `import config.settings` free of Celery start-up work. Celery puts the
    # working directory on sys.path only while it imports `config` itself, not
    # for this later lookup, and the app imports the other apps (dispatch.queues):
    # make sure the project root is importable whichever way the worker started.
    if name in {"app", "celery"}:
        if _ROOT not in sys.path:
            sys.path.insert(0, _ROOT)
        from config.celery_app import app

        return app
    raise AttributeError(name)
