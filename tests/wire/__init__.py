"""Tests of requests, answers, signing, sessions, retries and pacing (asyncdl._wire)."""
