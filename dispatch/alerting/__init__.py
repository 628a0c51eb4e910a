"""Alerting: a tenant's channels and delivering a message to one.

channel_config.py  what a channel's `config` may hold (save time): addresses, secret references
delivery.py        sending one message to one channel: email, Slack-compatible, signed webhook
"""
