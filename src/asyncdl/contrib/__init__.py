"""Integrations with other frameworks, each behind an optional extra (FastAPI,
OpenTelemetry), and the HTTP range logic the FastAPI one answers with, which needs none.
"""
