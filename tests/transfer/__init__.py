"""Tests of one object's download: plan, parts, verification, resume (asyncdl._transfer)."""
