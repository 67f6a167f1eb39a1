"""Integrations with other frameworks, each behind an optional extra."""
