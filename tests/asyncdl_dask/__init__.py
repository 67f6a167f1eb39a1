"""Tests of asyncdl.dask."""
