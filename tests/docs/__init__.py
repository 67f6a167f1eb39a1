"""Tests of the documentation's examples, reference and command reference run and checked."""
