"""Execution history: partitions by day, archive to object storage."""
