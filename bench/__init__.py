"""Benchmarks behind `python manage.py bench <which>`: one module per subcommand.

Every benchmark runs the platform's real processes (beats, Celery workers, the
web server) against the configured database and broker, creates a throwaway
tenant of its own, and removes what it created when it ends. Results are
merged into a JSON file (bench-results.json by default), each figure next to
the raw ceiling `limits` measured, so a regression shows as a ratio.
"""
