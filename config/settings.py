"""Settings, all from the environment (every one: docs/reference/configuration.md).

With no DATABASE_URL / CELERY_BROKER_URL the platform uses the embedded
PostgreSQL and Redis of config/embedded.py — the same code paths, real servers.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config import embedded
from config.env import get, get_bool, get_int, get_list
from core import pg_urls, redis_urls
from dispatch.queues import DEFAULT_QUEUE

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = embedded.data_dir()


def _dev_secret_key() -> str:
    # A development key that survives restarts without being committed anywhere.
    path = DATA_DIR / "secret_key"
    if not path.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


DEBUG = get_bool("DEBUG", False)
SECRET_KEY = get("SECRET_KEY") or _dev_secret_key()
ALLOWED_HOSTS = get_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = get_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    # First, so its `runserver` (config/management: chunked request bodies) wins.
    "config",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # Before staticfiles: runserver leaves static files to WhiteNoise in every mode.
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "tenants",
    "dispatch",
    "console",
    # The benchmark suite: only its `manage.py bench` command (no models).
    "bench",
]

MIDDLEWARE = [
    "config.middleware.RequestIdMiddleware",
    # A view's database outage is a 503 with Retry-After, not a 500 (the API's own views
    # answer it through REST_FRAMEWORK's EXCEPTION_HANDLER; this covers every other view).
    "config.middleware.DatabaseUnavailableMiddleware",
    "config.middleware.ApiBodyGuardMiddleware",
    "config.middleware.InputGuardMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files in every mode (runserver --noreload with DEBUG off, gunicorn):
    # Django's own static view only works with DEBUG on.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]

DATABASE_URL = get("DATABASE_URL") or embedded.database_url()
if not DATABASE_URL.startswith(pg_urls.SCHEMES):
    # PostgreSQL is the source of truth (SKIP LOCKED, LISTEN/NOTIFY); there is no other backend.
    raise ImproperlyConfigured("DATABASE_URL must be a postgresql://user@host:port/dbname URL")
try:
    # One host, or a replicated cluster's hosts in libpq's multi-host form
    # (postgresql://u@h1:p1,h2:p2/db): every new connection finds the primary
    # (core/pg_urls.py, docs/how-to/ha-postgresql.md).
    _database = pg_urls.parse(
        DATABASE_URL, conn_max_age=get_int("DB_CONN_MAX_AGE", 60), conn_health_checks=True
    )
except pg_urls.BadDatabaseUrl as exc:
    raise ImproperlyConfigured(f"DATABASE_URL cannot be read: {exc}") from None
DATABASES = {"default": _database}
DATABASES["default"].setdefault("OPTIONS", {})
# A client that stalls inside a transaction must not hold row locks forever: a paused
# claimer otherwise makes every other beat skip its rows (failure contract,
# "Stalled sessions hold no locks": docs/explanation/failure-contract.md).
#
# No JIT compilation: PostgreSQL compiles a plan whose cost estimate passes
# jit_above_cost at every execution, cached plan or not, and a plan over every day
# partition of history passes it by its size alone: /metrics' in-flight count per
# tenant took 1.5 s a scrape at 253 partitions, all of it compiling, for a query that
# runs in 7 ms (docs/explanation/history.md). No statement here gains from it.
DATABASES["default"]["OPTIONS"].setdefault(
    "options",
    f"-c idle_in_transaction_session_timeout={get_int('DB_IDLE_IN_TX_TIMEOUT_MS', 60000)}"
    " -c jit=off",
)
# Prepared statements for the named-statement runner (core/db.py): psycopg prepares a
# statement on a connection once it has run DB_PREPARE_AFTER times there, and
# PostgreSQL then keeps its plan. Django turns them off by default (for poolers that
# cannot keep them); here they are on, because a statement that cannot prune the day
# partitions of history at planning (the beat's probe and loads, a worker's finish) is
# otherwise planned over every partition at every execution: 61 ms for the beat's
# probe at 40 partitions, against 0.6 ms to run it. Django's own ORM queries are
# never prepared (their cursors bind on the client). docs/explanation/history.md.
DB_PREPARED_STATEMENTS = get_bool("DB_PREPARED_STATEMENTS", True)
DB_PREPARE_AFTER = 5  # psycopg's default threshold
DATABASES["default"]["OPTIONS"].setdefault(
    "prepare_threshold", DB_PREPARE_AFTER if DB_PREPARED_STATEMENTS else None
)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# An optional streaming replica for the reads that tolerate a bounded staleness: the
# console's lists, the runs page, the health pages and /metrics (core/replicas.py,
# docs/how-to/replicas.md). Writes, claims, admission, the explainer and every read of
# auth, sessions and tenants stay on the primary whatever this says.
DATABASE_REPLICA_URL = get("DATABASE_REPLICA_URL")
if DATABASE_REPLICA_URL:
    if not DATABASE_REPLICA_URL.startswith(pg_urls.SCHEMES):
        raise ImproperlyConfigured("DATABASE_REPLICA_URL must be a postgresql:// URL")
    try:
        DATABASES["replica"] = pg_urls.parse(
            DATABASE_REPLICA_URL,
            conn_max_age=get_int("DB_CONN_MAX_AGE", 60),
            conn_health_checks=True,
        )
    except pg_urls.BadDatabaseUrl as exc:
        raise ImproperlyConfigured(f"DATABASE_REPLICA_URL cannot be read: {exc}") from None
    # A replica that does not answer must cost a page little: it is skipped after this.
    DATABASES["replica"].setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", get_int("REPLICA_CONNECT_TIMEOUT_S", 2)
    )
    for _option in ("options", "prepare_threshold"):
        DATABASES["replica"]["OPTIONS"].setdefault(
            _option, DATABASES["default"]["OPTIONS"][_option]
        )
DATABASE_ROUTERS = ["core.replicas.ReplicaRouter"]
# The staleness bound: a replica further behind than this is not read from.
REPLICA_MAX_LAG_S = get_int("REPLICA_MAX_LAG_S", 10)
# How often a web process asks the replica its lag, and how long it leaves an
# unreachable one alone before asking again.
REPLICA_PROBE_S = get_int("REPLICA_PROBE_S", 1)
REPLICA_RETRY_S = get_int("REPLICA_RETRY_S", 10)


def _cache_url() -> str:
    # The cache (throttles, rate limits) lives in Redis database 1, apart from a
    # Redis broker's database 0: clearing the cache must never drop queued work.
    broker = get("CELERY_BROKER_URL") or ""
    if redis_urls.is_redis(broker):
        return redis_urls.redis_py_url(broker, db=1)
    return redis_urls.redis_py_url(embedded.redis_url(), db=1)


REDIS_URL = get("REDIS_URL") or _cache_url()
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": get("CACHE_KEY_PREFIX", "sched") or "sched",
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Development (make run, tests): WhiteNoise serves straight from the apps' and
# static/ folders, so there is no collectstatic step to forget, and no
# STATIC_ROOT (WhiteNoise would warn that it does not exist). production.py
# collects into one and serves hashed, compressed copies from it.
STATIC_ROOT = get("STATIC_ROOT") or None
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# --- Security defaults (production.py tightens the rest) ---
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

# --- REST API ---
# Requests per token (or per client address when unauthenticated): "N/s|min|hour|day".
API_RATE_LIMIT = get("API_RATE_LIMIT", "1200/min")
API_MAX_BODY_BYTES = get_int("API_MAX_BODY_BYTES", 64 * 1024)
# The bulk endpoints (`…:bulk`) take up to BULK_MAX_ITEMS ids: 10,000 UUIDs in JSON
# are ~400 KB, so they have a limit of their own; every other endpoint keeps the one above.
API_BULK_MAX_BODY_BYTES = get_int("API_BULK_MAX_BODY_BYTES", 512 * 1024)
# While the database cannot serve a request (unreachable, read-only or in recovery:
# a fail-over or switchover, a restart) the API and the console answer 503 with this
# Retry-After, never a 500 (core/db.py decides; core/api/errors.py answers). A
# planned switchover takes a few seconds, so clients come back soon after it.
DB_UNAVAILABLE_RETRY_AFTER_S = get_int("DB_UNAVAILABLE_RETRY_AFTER_S", 2)
# Brute-force limits (tenants/limits.py): failed attempts per window, counted
# atomically in Redis. A console or admin login is refused (inline message) once
# its username or its client address is over the limit, even with the right
# password; a client address over the token-failure limit gets 429 for every
# failed API authentication (a valid token still works from it).
LOGIN_FAILURES_PER_USER = get("LOGIN_FAILURES_PER_USER", "10/15min") or "10/15min"
LOGIN_FAILURES_PER_ADDRESS = get("LOGIN_FAILURES_PER_ADDRESS", "50/15min") or "50/15min"
API_AUTH_FAILURES_PER_ADDRESS = get("API_AUTH_FAILURES_PER_ADDRESS", "100/15min") or "100/15min"
# Invitation links (tenants: a tenant admin invites someone on the members page):
# POSTs to an invitation's page per client address (each may create an account and
# hash a password), refused with 429 once over; and how long a link works.
INVITE_ATTEMPTS_PER_ADDRESS = get("INVITE_ATTEMPTS_PER_ADDRESS", "20/15min") or "20/15min"
INVITATION_TTL_DAYS = get_int("INVITATION_TTL_DAYS", 7)
# Reverse proxies in front of the web process that append to X-Forwarded-For:
# the client address is the entry this many hops from the right (0: REMOTE_ADDR).
TRUSTED_PROXY_COUNT = get_int("TRUSTED_PROXY_COUNT", 0)
# Django's own cap sits at the larger limit; ApiBodyGuardMiddleware applies the
# per-endpoint one (413), chunked bodies included (config/chunked.py reads at most this).
DATA_UPLOAD_MAX_MEMORY_SIZE = max(API_MAX_BODY_BYTES, API_BULK_MAX_BODY_BYTES)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["tenants.api.authentication.ServiceTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["tenants.api.permissions.HasTenantRole"],
    "DEFAULT_PARSER_CLASSES": ["core.api.inputs.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_THROTTLE_CLASSES": ["tenants.api.throttling.TokenRateThrottle"],
    "EXCEPTION_HANDLER": "core.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Scheduler platform API",
    "DESCRIPTION": (
        "Multi-tenant job scheduling. Delivery is at-least-once: every attempt carries "
        "execution_id, scheduled_for, attempt and fencing_token so targets can deduplicate "
        "and reject stale attempts. One execution record per occurrence "
        "(UNIQUE(schedule_id, scheduled_for)).\n\n"
        "Time: schedules are evaluated in the local wall-clock time of their IANA zone, and all "
        "results are UTC instants. When clocks spring forward, a time that does not exist runs "
        "once, at the first instant after the gap (Amsterdam 02:30 on 2026-03-29 runs at 03:00 "
        "CEST). When clocks fall back, a repeated time runs once, at its first occurrence, unless "
        "the hour field as written starts with * (*, */2): those run in both real hours. A hashed "
        "hour (H) counts as fixed. Runs that land on the same instant fire once, so 0 * * * * runs "
        "23 times on a spring-forward day and 25 on a fall-back day. GET /v1/schedules/{id}/preview "
        "shows every occurrence with its DST note."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Choice sets several components share (a job is a schedule and the bulk filter
    # names a kind; an operation and its page) get one stable name, not a hashed one.
    "ENUM_NAME_OVERRIDES": {
        "ScheduleOutDocKindEnum": "dispatch.states.Kind.values",
        "ControlStateEnum": "dispatch.states.ControlState.values",
        # Schedules and alert channels both have a "kind" field: name each choice set.
        "ChannelKindEnum": "dispatch.states.ChannelKind.choices",
        # Apply's changes (schedules and calendars) and the bulk actions: both "action".
        "ApplyActionEnum": "dispatch.services.apply.CHANGE_ACTIONS",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.api.openapi.add_error_responses",
    ],
    # Swagger UI served from the package, not a CDN: works on closed networks.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Celery ---
CELERY_BROKER_URL = get("CELERY_BROKER_URL") or embedded.broker_url()
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = False  # the DB lease decides retries, not redelivery loops
# 1: with late acks a process reserves only the message it runs, so a message
# published later with a higher priority is not stuck behind reserved lows.
CELERY_WORKER_PREFETCH_MULTIPLIER = get_int("CELERY_PREFETCH_MULTIPLIER", 1)
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # RabbitMQ: publisher confirms, so a published batch is really on the broker.
    "confirm_publish": True,
    # Redis: a worker drains high.* before default.* before low.* (round robin otherwise);
    # RabbitMQ uses a priority queue instead (config/celery_app.py).
    "queue_order_strategy": "config.celery_app:PriorityOrder",
    # Redis: no call on a silent (black-holed) broker link waits forever — kombu's
    # default is no socket timeout. Above the 1 s BRPOP poll a worker idles in.
    "socket_timeout": float(get("BROKER_SOCKET_TIMEOUT_S", "5") or 5),
    "socket_connect_timeout": float(get("BROKER_SOCKET_TIMEOUT_S", "5") or 5),
}
CELERY_TASK_DEFAULT_QUEUE = DEFAULT_QUEUE

# --- Scheduling ---
SCHEDULER_PARTITIONS = get_int("SCHEDULER_PARTITIONS", 16)
if not 1 <= SCHEDULER_PARTITIONS <= 1024:
    # Ranges of the 1,024 fixed logical partitions (dispatch/partitioning.py).
    raise ImproperlyConfigured(f"SCHEDULER_PARTITIONS={SCHEDULER_PARTITIONS} must be 1 to 1024")
DEFAULT_MISFIRE_GRACE_S = get_int("DEFAULT_MISFIRE_GRACE_S", 60)
MAX_CATCH_UP = get_int("MAX_CATCH_UP", 100)
PREVIEW_MAX_COUNT = get_int("PREVIEW_MAX_COUNT", 1000)
# Occurrences one backfill request may cover: the plan is stored with the backfill
# (one JSON array) and the dry run lists every one, so both stay a bounded size.
BACKFILL_MAX_OCCURRENCES = get_int("BACKFILL_MAX_OCCURRENCES", 10_000)
# Running backfills one tenant may have at once (a create beyond is a 409 naming the bound
# and how many run): the control pump's fair turn goes round tenants, and this bounds the
# rows one tenant puts in front of the pump's candidate read.
BACKFILL_MAX_RUNNING_PER_TENANT = get_int("BACKFILL_MAX_RUNNING_PER_TENANT", 10)

# --- Beat (scheduler shards) ---
BEAT_LEASE_TTL_S = float(get("BEAT_LEASE_TTL_S", "10") or 10)
# A beat whose main loop has not come round for this long (a database or broker
# call that never returns) exits with 70 so its supervisor restarts it; 0 disables.
BEAT_STALL_EXIT_S = float(get("BEAT_STALL_EXIT_S", "60") or 0)
BEAT_CYCLE_S = float(get("BEAT_CYCLE_S", "1") or 1)
# A beat that has had work due and published nothing for this long (its broker link
# dead or silent) hands its partitions over to a beat that can publish, and stands by
# for at least BEAT_PUBLISH_COOLOFF_S before it probes its broker and takes part
# again (dispatch/scheduler/handover.py); 0 disables the hand-over.
BEAT_PUBLISH_STALL_S = float(get("BEAT_PUBLISH_STALL_S", "5") or 0)
BEAT_PUBLISH_COOLOFF_S = float(get("BEAT_PUBLISH_COOLOFF_S", "30") or 0)
# RabbitMQ: a beat keeps up to BEAT_AMQP_WINDOWS chunks of 1,000 messages published and
# awaiting their publisher confirms at once, round robin over BEAT_AMQP_CHANNELS
# channels of its one connection (dispatch/scheduler/publish.py, issue 36).
BEAT_AMQP_CHANNELS = max(1, get_int("BEAT_AMQP_CHANNELS", 2))
BEAT_AMQP_WINDOWS = max(1, get_int("BEAT_AMQP_WINDOWS", 4))
# Pre-staged firing: occurrences are claimed, planned, inserted (next_run_at advanced)
# and loaded into the beat's heap this long before they are due, so at the due
# instant the beat only admits and publishes. BEAT_LOOKAHEAD_S is the old name
# (same meaning; read when the new one is unset). Edits within the window withdraw
# and re-plan what is staged (services/schedules.py).
BEAT_STAGE_AHEAD_S = float(get("BEAT_STAGE_AHEAD_S", "") or get("BEAT_LOOKAHEAD_S", "") or 90)
BEAT_LOOKAHEAD_S = BEAT_STAGE_AHEAD_S
BEAT_BATCH = get_int("BEAT_BATCH", 1000)
# Queued but unclaimed this long: the broker lost the message; publish it again.
QUEUED_REPUBLISH_S = float(get("QUEUED_REPUBLISH_S", "60") or 60)
# How long a worker whose delivery met an unavailable database (a restart, a fail-over)
# waits for a writable one before it acknowledges the message and leaves the run to
# the beat's re-publish (dispatch/tasks.py).
WORKER_DB_WAIT_S = float(get("WORKER_DB_WAIT_S", "30") or 30)
SWEEP_INTERVAL_S = float(get("SWEEP_INTERVAL_S", "2") or 2)
# How often an idle step of the control pump (each beat runs every step, backfills,
# bulk operations, the late scan, the alert sender, on a thread of its own) looks for
# work; while it finds some it goes on at once.
CONTROL_INTERVAL_S = float(get("CONTROL_INTERVAL_S", "1") or 1)
# Bulk actions (POST /v1/schedules:bulk, /v1/executions:bulk): at most BULK_MAX_ITEMS
# objects per request, ids or a filter's matches (a 400 names the field beyond), so one
# request cannot lock up the pump for hours. Up to BULK_SYNC_MAX run inside the request
# (200 with every item's result); a larger set becomes an operation the control pump
# carries BULK_CHUNK items per transaction (202).
BULK_MAX_ITEMS = get_int("BULK_MAX_ITEMS", 10_000)
BULK_SYNC_MAX = get_int("BULK_SYNC_MAX", 100)
BULK_CHUNK = get_int("BULK_CHUNK", 100)
# Items of one tenant's running bulk operations not worked yet (a request that would queue
# more is a 429 naming the bound and what is queued; it frees as the pump works them).
# The pump takes tenants in turn, so this bounds the table a tenant fills, not others' wait.
BULK_MAX_QUEUED_ITEMS_PER_TENANT = get_int("BULK_MAX_QUEUED_ITEMS_PER_TENANT", 20_000)
# Global cap on queued+running executions (0 = none); beyond it, fair share decides who waits.
DISPATCH_MAX_INFLIGHT = get_int("DISPATCH_MAX_INFLIGHT", 0)
# Hosts and networks that may never be a target, besides the built-in deny list
# (comma-separated CIDRs or host names; the platform's own DB/broker/Vault hosts are added).
TARGET_DENY_EXTRA = get_list("TARGET_DENY_EXTRA", [])
# Test-only escape hatch: exact "ip:port" loopback receivers targets may reach.
# Empty in production; the always-denied ranges stay denied for everything else.
TARGET_TEST_ALLOW = get_list("TARGET_TEST_ALLOW", [])
# Set by `make run` (run_platform) to its demo receiver: the console's new-schedule
# form proposes it as the target.
DEMO_RECEIVER_URL = get("DEMO_RECEIVER_URL", "")

# --- Metrics ---
# /metrics shows every tenant's slug and counts. With METRICS_TOKEN (or
# METRICS_TOKEN_FILE) set, scrapes need `Authorization: Bearer <token>`; without
# one they are served only when METRICS_PUBLIC allows it (the development
# default; config/production.py defaults it to false).
METRICS_TOKEN = get("METRICS_TOKEN", "") or ""
METRICS_PUBLIC = get_bool("METRICS_PUBLIC", True)

# "json" for structured logs (one object per line, with execution/schedule/tenant/trace ids).
LOG_FORMAT = get("LOG_FORMAT", "plain") or "plain"
LOG_LEVEL = get("LOG_LEVEL", "INFO") or "INFO"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "config.logs.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    # A 4xx is the client's mistake: INFO, not a warning (config/logs.py).
    "filters": {"client_errors": {"()": "config.logs.ClientErrorsAtInfo"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.request": {"filters": ["client_errors"]},
        "django.db.backends": {"level": "WARNING"},
        # The embedded PostgreSQL's wheel logs every pg_ctl command line at INFO.
        "pgserver": {"level": "WARNING"},
        # runserver's request log follows LOG_LEVEL too: `make run` (WARNING) shows
        # only 4xx/5xx, not every 5 s dashboard refresh.
        "django.server": {
            "handlers": ["console"],
            "level": LOG_LEVEL,
            "propagate": False,
            "filters": ["client_errors"],
        },
    },
}

# --- History retention ---
RETENTION_DAYS = get_int("RETENTION_DAYS", 30)
# Occurrence keys younger than this are never deleted, whatever the retention.
RETENTION_MISFIRE_HORIZON_S = get_int("RETENTION_MISFIRE_HORIZON_S", 7 * 24 * 3600)
RETENTION_ARCHIVE_DIR = get("RETENTION_ARCHIVE_DIR", "") or ""
RETENTION_INTERVAL_S = get_int("RETENTION_INTERVAL_S", 3600)
# Where execution history is archived, one day at a time (dispatch/history): an
# s3://bucket/prefix URL, or file:///path. Empty: a local folder (RETENTION_ARCHIVE_DIR,
# else the data folder's archive/), so the embedded platform archives with no setup.
HISTORY_ARCHIVE_URL = get("HISTORY_ARCHIVE_URL", "") or ""
# An S3-compatible server's address (MinIO, Ceph, ...); empty: AWS itself.
HISTORY_ARCHIVE_S3_ENDPOINT = get("HISTORY_ARCHIVE_S3_ENDPOINT", "") or ""
HISTORY_ARCHIVE_S3_REGION = get("HISTORY_ARCHIVE_S3_REGION", "us-east-1") or "us-east-1"
# The share of the time the archive pass works (0 < duty <= 1): it rests between chunks
# so its scan of a day leaves the database's CPUs to the firing path (1: no rest). On two
# shared CPUs any busy share shows in the beats' p99 (even work the kernel runs only on
# idle CPU): 5 % keeps it within 1.1x, at 11 minutes a day of a million executions
# (docs/explanation/history.md).
HISTORY_ARCHIVE_DUTY = float(get("HISTORY_ARCHIVE_DUTY", "0.05") or 0.05)
if not 0 < HISTORY_ARCHIVE_DUTY <= 1:
    raise ImproperlyConfigured("HISTORY_ARCHIVE_DUTY must be more than 0 and at most 1")
# No S3 credential settings on purpose: boto3 reads AWS_ACCESS_KEY_ID /
# AWS_SECRET_ACCESS_KEY (or a profile, or an instance role) itself, so the keys never
# sit in django.conf.settings, which debug pages and `diffsettings` print.

# --- Execution (workers) ---
# Leases and fencing: a worker holds an execution for EXECUTION_LEASE_S and
# heartbeats every third of it; the sweeper re-runs executions whose lease
# lapsed. The backstop grace is added to a schedule's timeout before the
# sweeper treats a still-heartbeating run as hung.
EXECUTION_LEASE_S = get_int("EXECUTION_LEASE_S", 30)
EXECUTION_BACKSTOP_GRACE_S = get_int("EXECUTION_BACKSTOP_GRACE_S", 60)
# A result the database did not take (connection lost, server restarting) is
# retried on a fresh connection for this long before the worker gives up on it
# (the lease then lapses and the sweeper re-runs the job). Token-conditional, so
# a retry never overwrites a newer claim.
FINISH_RETRY_S = float(get("FINISH_RETRY_S", "30") or 30)
# Names the worker in lease_owner and events; the pool process id is appended
# at run time (prefork children share the parent's settings). Default: hostname.
WORKER_ID = get("WORKER_ID", "") or ""
# Stored response / output excerpts are cut to this many bytes.
RESPONSE_EXCERPT_BYTES = get_int("RESPONSE_EXCERPT_BYTES", 4096)
# Live logs of an attempt (dispatch/logs.py), in Redis while it runs, then kept with
# the execution: text bytes kept per attempt (the oldest lines go first), characters
# per line, and how long a log never sealed (its attempt's end not seen) lives.
LIVE_LOG_MAX_BYTES = get_int("LIVE_LOG_MAX_BYTES", 1024 * 1024)
LIVE_LOG_LINE_CHARS = get_int("LIVE_LOG_LINE_CHARS", 2_000)
LIVE_LOG_RETENTION_S = get_int("LIVE_LOG_RETENTION_S", 7 * 24 * 3600)
# Secret references are resolved at run time by these backends ("env", "vault";
# comma-separated). `env:NAME` reads SCHED_SECRET_<TENANT>__<NAME> from the
# worker's environment (the embedded default); `vault:` reads Vault KV v2 on
# VAULT_MOUNT only (docs/explanation/security.md, "Secret references").
VAULT_ADDR = get("VAULT_ADDR", "") or ""
VAULT_TOKEN = get("VAULT_TOKEN", "") or ""  # VAULT_TOKEN_FILE works too (config/env.py)
VAULT_MOUNT = get("VAULT_MOUNT", "kv") or "kv"
VAULT_TIMEOUT_S = get_int("VAULT_TIMEOUT_S", 5)
SECRETS_BACKEND = get_list("SECRETS_BACKEND", ["vault"] if VAULT_ADDR else ["env"])
# Managed commands run in a bubblewrap sandbox ("bwrap"); without bwrap they fail
# closed. "none" runs them unsandboxed, for development only (config.production
# refuses it). As root the worker drops to COMMAND_SANDBOX_UID/GID before bwrap.
COMMAND_SANDBOX = get("COMMAND_SANDBOX", "bwrap") or "bwrap"
if COMMAND_SANDBOX not in ("bwrap", "none"):
    raise ImproperlyConfigured("COMMAND_SANDBOX must be 'bwrap' or 'none' (development only)")
COMMAND_SANDBOX_BWRAP = get("COMMAND_SANDBOX_BWRAP", "bwrap") or "bwrap"
COMMAND_SANDBOX_UID = get_int("COMMAND_SANDBOX_UID", 65534)
COMMAND_SANDBOX_GID = get_int("COMMAND_SANDBOX_GID", 65534)
COMMAND_SANDBOX_TMP_MB = get_int("COMMAND_SANDBOX_TMP_MB", 64)
# Workload identity (dispatch/identity): the platform's public base URL, the `iss` of
# every run's identity token and where verifiers find /.well-known/openid-configuration;
# and the secret the stored signing keys are sealed under (default: SECRET_KEY).
PLATFORM_URL = (get("PLATFORM_URL", "http://127.0.0.1:8000") or "").rstrip("/")
WORKLOAD_IDENTITY_KEY_SECRET = get("WORKLOAD_IDENTITY_KEY_SECRET", "") or ""
# Token bucket per target host, shared by every worker through Redis: "N/s|min|hour".
TARGET_RATE_PER_HOST = get("TARGET_RATE_PER_HOST", "50/s") or "50/s"


def _target_brokers() -> dict[str, str]:
    # "name=url,name=url"; "default" is the platform's own broker unless overridden.
    brokers = {"default": CELERY_BROKER_URL}
    for item in get_list("TARGET_BROKERS", []):
        name, sep, url = item.partition("=")
        if not sep or not name.strip() or not url.strip():
            raise ImproperlyConfigured(f"TARGET_BROKERS entry {item!r} is not name=url")
        brokers[name.strip()] = url.strip()
    return brokers


TARGET_BROKERS = _target_brokers()
# Dead-execution notices to the owning tenant (webhook and/or email).
# Every outbound call of the platform's own control work has ONE total deadline
# (resolve, connect, send and the whole answer), not only a per-read timeout: a peer
# that dribbles a byte every few seconds would otherwise hold the thread for hours.
# It bounds every alert send, webhook, Slack and email (the whole SMTP conversation).
ALERT_WEBHOOK_TIMEOUT_S = get_int("ALERT_WEBHOOK_TIMEOUT_S", 5)
# An .ics feed is fetched once, in the web request that saves its calendar: well
# inside the web server's own request timeout.
CALENDAR_FETCH_TIMEOUT_S = get_int("CALENDAR_FETCH_TIMEOUT_S", 10)
# Bounds the CPU one calendar's expansion may take (dispatch/calendars.py): a save
# whose .ics takes longer is refused with a 400 naming the source; the refresh of
# stored dates (control pump) and the dates API stop there with what they have.
CALENDAR_EXPAND_BUDGET_S = float(get("CALENDAR_EXPAND_BUDGET_S", "2") or 2)
ALERT_EMAIL_FROM = get("ALERT_EMAIL_FROM", "scheduler@localhost") or "scheduler@localhost"
# The alert outbox's sender (dispatch/alerting/outbox.py, on the beats' control pump):
# tries per alert, exponential backoff between them, and how long a claimed alert is
# left to its sender before another may take it up (a crash mid-send: one duplicate):
# ALERT_SEND_LEASE_S for the sender's own work, plus ALERT_WEBHOOK_TIMEOUT_S for each
# send the claim may make (the claim counts them), so a slow send is never taken twice.
ALERT_MAX_ATTEMPTS = get_int("ALERT_MAX_ATTEMPTS", 8)
ALERT_RETRY_INITIAL_S = get_int("ALERT_RETRY_INITIAL_S", 5)
ALERT_RETRY_MAX_S = get_int("ALERT_RETRY_MAX_S", 900)
ALERT_SEND_LEASE_S = get_int("ALERT_SEND_LEASE_S", 60)
# Tenants whose alerts one beat sends at once, each tenant's on a thread of its own:
# a tenant whose channel is slow holds one of them, never another tenant's alerts.
ALERT_SEND_THREADS = get_int("ALERT_SEND_THREADS", 4)
EMAIL_BACKEND = (
    get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
    or "django.core.mail.backends.console.EmailBackend"
)
# The SMTP relay of django.core.mail.backends.smtp.EmailBackend (alert channels of kind
# email). The password comes from the environment or, as every secret-bearing
# variable, from EMAIL_HOST_PASSWORD_FILE (a mounted Vault/Kubernetes secret).
EMAIL_HOST = get("EMAIL_HOST", "localhost") or "localhost"
EMAIL_PORT = get_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = get("EMAIL_HOST_USER", "") or ""
EMAIL_HOST_PASSWORD = get("EMAIL_HOST_PASSWORD", "") or ""
EMAIL_USE_TLS = get_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = get_int("EMAIL_TIMEOUT", 10)

# --- Web console (issue 6) ---
# A strict Content-Security-Policy on the console's pages (config/security.py):
# scripts and styles only from our own static files; htmx is django-htmx's copy.
MIDDLEWARE.append("config.security.ContentSecurityPolicyMiddleware")
# The API docs (/v1/docs) get their own policy, config.security.DOCS_POLICY.
CSP_EXEMPT_PREFIXES = ["/admin/"]
