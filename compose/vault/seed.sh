#!/bin/sh
# Vault dev server with one seeded KV v2 secret for the demo tenant.
vault server -dev &
until vault status >/dev/null 2>&1; do sleep 1; done
vault kv put kv/demo/api token=demo-secret-token >/dev/null 2>&1 \
  || (vault secrets enable -path=kv kv-v2 && vault kv put kv/demo/api token=demo-secret-token)
wait
