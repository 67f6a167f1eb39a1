"""Tests of the asyncdl command (asyncdl.cli), its processes killed and interrupted."""
