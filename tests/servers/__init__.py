"""Tests of the servers tests run on (asyncdl.testing) and S3-compatible servers."""
