"""Tests of temp files, partials, journals, records and writes on disk (asyncdl._files)."""
