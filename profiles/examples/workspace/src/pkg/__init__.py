"""Helpers for calc."""
