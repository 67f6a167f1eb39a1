"""Test and benchmark helpers: an embedded moto S3 server and an HTTP-aware TCP proxy.

Not part of the download API; the demo, the test suite and the benchmarks share them,
and your own tests may use them too. They may change in any minor release. The moto
server needs the ``asyncdl[demo]`` extra.
"""
