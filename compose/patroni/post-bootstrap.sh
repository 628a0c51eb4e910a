#!/bin/sh
# Patroni's post_bootstrap (compose/patroni/patroni.yml): run once, on the node that
# initialised the cluster, with the superuser's connection URL as $1. Creates the
# platform's role and database; `migrate` creates the tables.
set -e
psql "$1" -v ON_ERROR_STOP=1 \
  -v password="${SCHEDULER_DB_PASSWORD:?}" <<'SQL'
CREATE ROLE scheduler LOGIN PASSWORD :'password';
CREATE DATABASE scheduler OWNER scheduler;
SQL
