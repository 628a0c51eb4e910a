#!/bin/sh
set -e
exec python manage.py beat
