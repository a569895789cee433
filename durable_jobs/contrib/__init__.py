"""Integrations with other libraries, each installed with its own extra."""
