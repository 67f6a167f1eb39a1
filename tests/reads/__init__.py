"""Tests of streams, range reads and readers (asyncdl._reads)."""
