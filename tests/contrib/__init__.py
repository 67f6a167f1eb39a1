"""Tests of asyncdl.contrib: FastAPI serving, HTTP ranges, OpenTelemetry."""
