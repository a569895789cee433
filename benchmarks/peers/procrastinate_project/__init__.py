"""Procrastinate's side of the comparison: its app and tasks, and its driver."""
