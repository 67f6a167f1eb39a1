"""Tests of many objects: download_many, download_prefix and listing ahead (asyncdl._bulk)."""
