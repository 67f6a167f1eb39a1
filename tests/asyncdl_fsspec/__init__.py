"""Tests of asyncdl.fsspec."""
