"""Chaos suite: beats and workers under kill -9, SIGSTOP and crash faults (RELIABILITY.md)."""
