"""Chaos suite: beats and workers under kill -9, SIGSTOP and crash faults.

What it shows: docs/explanation/failure-contract.md, "The chaos suite".
"""
